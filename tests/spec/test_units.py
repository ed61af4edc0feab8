"""Human units: exact parsed values for good input, exact messages for bad input, exact formatting."""

from __future__ import annotations

import re

import pytest

from sandstack.spec.units import (
    CPUS_PATTERN,
    DURATION_PATTERN,
    SIZE_PATTERN,
    UnitError,
    format_cpus,
    format_duration,
    format_size,
    parse_cpus,
    parse_duration,
    parse_size,
)

KiB, MiB, GiB, TiB = 1024, 1024**2, 1024**3, 1024**4
SIZE_USE = ("use an integer number of bytes or a number with a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), "
            "e.g. '512MiB'")
DURATION_USE = "use a number with a unit (s, m, h, d), e.g. '90s', '45m', '1h30m', '24h'"
NO_UNIT = ("has no unit: write '{t}s' for {t} seconds{same}, or use m, h or d (a duration is a number with a "
           "unit, e.g. '90s', '45m', '24h')")
CPUS_USE = "use a number of CPUs such as 1, 0.5 or '1.5', or millicores such as '500m'"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (0, 0),
        (1024, 1024),
        (2**53 + 1, 2**53 + 1),  # stays exact: no trip through float
        (2**60, 2**60),
        ("0B", 0),
        ("1KB", 1000),
        ("1MB", 1000**2),
        ("1GB", 1000**3),
        ("1TB", 1000**4),
        ("1KiB", KiB),
        ("512MiB", 512 * MiB),
        ("1.5GiB", 3 * GiB // 2),
        ("2 GiB", 2 * GiB),
        ("  2GiB  ", 2 * GiB),
        ("1024TiB", 1024 * TiB),
        ("1048576TiB", 2**60),
        ("9007199254740993B", 2**53 + 1),
        ("1.5B", 1),  # fractions of a byte round down
        ("2.7B", 2),
    ],
)
def test_parse_size(text: object, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", f"'0' is not a size: {SIZE_USE}"),
        ("5", f"'5' is not a size: {SIZE_USE}"),
        ("512mib", f"'512mib' is not a size: {SIZE_USE}"),
        ("MiB", f"'MiB' is not a size: {SIZE_USE}"),
        ("1EiB", f"'1EiB' is not a size: {SIZE_USE}"),
        ("1e3MiB", f"'1e3MiB' is not a size: {SIZE_USE}"),
        ("-1MiB", f"'-1MiB' is not a size: {SIZE_USE}"),
        ("8 gigs", f"'8 gigs' is not a size: {SIZE_USE}"),
        ("", f"'' is not a size: {SIZE_USE}"),
        (1.5, f"1.5 is not a size: {SIZE_USE}"),
        (True, f"True is not a size: {SIZE_USE}"),
        (None, f"None is not a size: {SIZE_USE}"),
        ([], f"[] is not a size: {SIZE_USE}"),
        (-1, "-1 is out of range: sizes go from 0 to 1 EiB"),
        (2**60 + 1, "1152921504606846977 is out of range: sizes go from 0 to 1 EiB"),
        ("1048577TiB", "'1048577TiB' is out of range: sizes go from 0 to 1 EiB"),
        ("1152921504606846977B", "'1152921504606846977B' is out of range: sizes go from 0 to 1 EiB"),
        ("9" * 5000 + "TiB", "'" + "9" * 56 + "... is out of range: sizes go from 0 to 1 EiB"),
        pytest.param(10**5000, "a huge integer is out of range: sizes go from 0 to 1 EiB", id="huge-int"),
    ],
)
def test_parse_size_refuses(value: object, message: str) -> None:
    with pytest.raises(UnitError) as caught:
        parse_size(value)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0s", 0),
        ("90s", 90),
        ("45m", 2700),
        ("24h", 86400),
        ("7d", 604800),
        ("1h30m", 5400),
        ("1d12h", 129600),
        ("1.5h", 5400),
        (" 30s ", 30),
        ("3650d", 3650 * 86400),
    ],
)
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("value", "message"),
    [
        # Bare numbers are ambiguous, and the fix for seconds is named at once.
        ("30", f"'30' {NO_UNIT.format(t='30', same='')}"),
        (30, f"30 {NO_UNIT.format(t='30', same='')}"),
        (7200, "7200 has no unit: write '7200s' for 7200 seconds (that is '2h'), or use m, h or d (a duration is a "
               "number with a unit, e.g. '90s', '45m', '24h')"),
        (1.5, f"1.5 {NO_UNIT.format(t='1.5', same='')}"),
        (True, f"True is not a duration: {DURATION_USE}"),
        ("30 s", f"'30 s' is not a duration: {DURATION_USE}"),
        ("1m30", f"'1m30' is not a duration: {DURATION_USE}"),
        ("30min", f"'30min' is not a duration: {DURATION_USE}"),
        ("1w", f"'1w' is not a duration: {DURATION_USE}"),
        ("-5s", f"'-5s' is not a duration: {DURATION_USE}"),
        ("h", f"'h' is not a duration: {DURATION_USE}"),
        ("1.s", f"'1.s' is not a duration: {DURATION_USE}"),
        ("", f"'' is not a duration: {DURATION_USE}"),
        (None, f"None is not a duration: {DURATION_USE}"),
        ("3651d", "'3651d' is out of range: durations go up to 10 years"),
        ("9" * 400 + "d", "'" + "9" * 56 + "... is out of range: durations go up to 10 years"),
    ],
)
def test_parse_duration_refuses(value: object, message: str) -> None:
    with pytest.raises(UnitError) as caught:
        parse_duration(value)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("value", "cpus"),
    [
        (1, 1.0),
        (0.5, 0.5),
        ("1.5", 1.5),
        ("  2  ", 2.0),
        ("500m", 0.5),
        ("1m", 0.001),
        ("0.001", 0.001),
        (0.0015, 0.002),  # rounded to the millicore
        (4096, 4096.0),
        ("4096", 4096.0),
    ],
)
def test_parse_cpus(value: object, cpus: float) -> None:
    assert parse_cpus(value) == cpus


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, f"True is not a CPU amount: {CPUS_USE}"),
        (None, f"None is not a CPU amount: {CPUS_USE}"),
        ("abc", f"'abc' is not a CPU amount: {CPUS_USE}"),
        ("1.5m", f"'1.5m' is not a CPU amount: {CPUS_USE}"),
        ("1e3", f"'1e3' is not a CPU amount: {CPUS_USE}"),
        ("1.5 cores", f"'1.5 cores' is not a CPU amount: {CPUS_USE}"),
        (0, "0 is out of range: CPUs must be above 0 and at most 4096"),
        ("0m", "'0m' is out of range: CPUs must be above 0 and at most 4096"),
        (-1, "-1 is out of range: CPUs must be above 0 and at most 4096"),
        (4097, "4097 is out of range: CPUs must be above 0 and at most 4096"),
        (float("nan"), "nan is out of range: CPUs must be above 0 and at most 4096"),
        (float("inf"), "inf is out of range: CPUs must be above 0 and at most 4096"),
        ("0.0005", "'0.0005' is below the smallest CPU amount, 0.001 (1m)"),
        (0.0001, "0.0001 is below the smallest CPU amount, 0.001 (1m)"),
    ],
)
def test_parse_cpus_refuses(value: object, message: str) -> None:
    with pytest.raises(UnitError) as caught:
        parse_cpus(value)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("n_bytes", "text"),
    [(0, "0B"), (1, "1B"), (1023, "1023B"), (KiB, "1KiB"), (1536, "1.50KiB"), (MiB, "1MiB"), (9 * GiB, "9GiB"),
     (TiB, "1TiB"), (1500, "1.46KiB"), (10**9, "953.67MiB"), (8.0 * GiB, "8GiB"), (12.5 * GiB, "12800MiB")],
)
def test_format_size(n_bytes: int, text: str) -> None:
    assert format_size(n_bytes) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (1, "1s"), (59, "59s"), (60, "1m"), (90, "90s"), (3600, "1h"), (5400, "90m"), (86400, "1d"),
     (90000, "25h")],
)
def test_format_duration(seconds: int, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("cpus", "text"),
    [(0.5, "0.5"), (1.0, "1"), (0.001, "0.001"), (2.25, "2.25"), (4096.0, "4096"), (1234.567, "1234.567"),
     (0.1 + 0.2, "0.3")],
)
def test_format_cpus(cpus: float, text: str) -> None:
    assert format_cpus(cpus) == text


@pytest.mark.parametrize("text", ["512MiB", "9GiB", "1TiB", "1KiB", "1023B", "0B"])
def test_format_size_round_trips_exact_values(text: str) -> None:
    assert format_size(parse_size(text)) == text


@pytest.mark.parametrize("text", ["90s", "1m", "90m", "1h", "25h", "1d"])
def test_format_duration_round_trips(text: str) -> None:
    assert format_duration(parse_duration(text)) == text


@pytest.mark.parametrize(
    ("pattern", "good", "bad"),
    [
        (SIZE_PATTERN, ["512MiB", "1.5 GiB", "0B"], ["512", "512mib", " 1GiB"]),
        (DURATION_PATTERN, ["90s", "1h30m"], ["30", "30 s", "1w"]),
        (CPUS_PATTERN, ["1", "1.5", "500m"], ["1.5m", "-1", "1e3"]),
    ],
)
def test_published_patterns_accept_what_the_parsers_accept(pattern: str, good: list[str], bad: list[str]) -> None:
    assert [bool(re.match(pattern, t)) for t in good] == [True] * len(good)
    assert [bool(re.match(pattern, t)) for t in bad] == [False] * len(bad)
