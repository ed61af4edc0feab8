"""Human units in a spec (`512MiB`, `1.5`, `90s`), parsed and normalised once.

Every size becomes an integer number of bytes, every duration an integer number of
seconds and every CPU amount a float rounded to the millicore. The regular expressions
here are also what the JSON Schema publishes, so an editor and `sandstack validate`
accept exactly the same strings.
"""

from __future__ import annotations

import math
import re

# The binary sizes, defined here once for every layer (spec, plan, review, policy).
KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4
SIZE_UNITS: dict[str, int] = {
    "B": 1,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
    "KiB": KIB,
    "MiB": MIB,
    "GiB": GIB,
    "TiB": TIB,
}
DURATION_UNITS: dict[str, int] = {"s": 1, "m": 60, "h": 3600, "d": 86400}

SIZE_PATTERN = r"^[0-9]+(\.[0-9]+)?\s?(" + "|".join(SIZE_UNITS) + r")$"
# One or more number+unit parts, largest first by convention: `90s`, `1h30m`, `7d`.
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?[smhd])+$"
CPUS_PATTERN = r"^([0-9]+(\.[0-9]+)?|[0-9]+m)$"

SIZE_HINT = "an integer number of bytes or a number with a unit (" + ", ".join(SIZE_UNITS) + "), e.g. '512MiB'"
DURATION_HINT = "a number with a unit (s, m, h, d), e.g. '90s', '45m', '1h30m', '24h'"
CPUS_HINT = "a number of CPUs such as 1, 0.5 or '1.5', or millicores such as '500m'"

_SIZE_RE = re.compile(SIZE_PATTERN)
_DURATION_PART_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd])")
_DURATION_RE = re.compile(DURATION_PATTERN)
_CPUS_RE = re.compile(CPUS_PATTERN)

# Bigger than any real host; stops a 400-digit number from becoming a Python bigint
# that Docker would then reject far from the spec.
MAX_BYTES = 2**60
MAX_SECONDS = 10 * 365 * 86400
MAX_CPUS = 4096.0


class UnitError(ValueError):
    """A value that is not in the expected unit syntax; the message says what is allowed."""


def _shown(value: object) -> str:
    """The value as a message quotes it, cut short so a 5000-digit number stays a readable line."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's 4300-digit conversion limit
        return "a huge integer"
    return text if len(text) <= 60 else text[:57] + "..."


def _is_plain_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_size(value: object) -> int:
    """`'512MiB'` → 536870912; a plain integer is a byte count."""
    # Whole numbers stay integers: a float holds only 53 bits, so 2**53 + 1 bytes would silently change.
    if _is_plain_int(value):
        number: int | float = value
    elif isinstance(value, str) and _SIZE_RE.match(value.strip()):
        match = _SIZE_RE.match(value.strip())
        assert match is not None
        unit = match.group(2)
        digits = value.strip()[: -len(unit)].strip()
        number = float(digits) * SIZE_UNITS[unit]
        if match.group(1) is None and number <= MAX_BYTES:
            number = int(digits) * SIZE_UNITS[unit]
    else:
        raise UnitError(f"{_shown(value)} is not a size: use {SIZE_HINT}")
    if number < 0 or number > MAX_BYTES:
        raise UnitError(f"{_shown(value)} is out of range: sizes go from 0 to 1 EiB")
    return int(math.floor(number))


def parse_duration(value: object) -> int:
    """`'1h30m'` → 5400 seconds. Bare numbers are refused: `30` could mean seconds or minutes."""
    if not isinstance(value, str) or not _DURATION_RE.match(value.strip()):
        raise UnitError(unitless_duration(value) or f"{_shown(value)} is not a duration: use {DURATION_HINT}")
    total = sum(float(n) * DURATION_UNITS[u] for n, u in _DURATION_PART_RE.findall(value.strip()))
    if total > MAX_SECONDS:
        raise UnitError(f"{_shown(value)} is out of range: durations go up to 10 years")
    return int(round(total))


def parse_cpus(value: object) -> float:
    """`1.5`, `'1.5'` or `'500m'` → CPUs as a float, rounded to the millicore."""
    if isinstance(value, bool):
        raise UnitError(f"{_shown(value)} is not a CPU amount: use {CPUS_HINT}")
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str) and _CPUS_RE.match(value.strip()):
        text = value.strip()
        number = float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    else:
        raise UnitError(f"{_shown(value)} is not a CPU amount: use {CPUS_HINT}")
    if not math.isfinite(number) or number <= 0 or number > MAX_CPUS:
        raise UnitError(f"{_shown(value)} is out of range: CPUs must be above 0 and at most {MAX_CPUS:g}")
    if number < 0.001:
        raise UnitError(f"{_shown(value)} is below the smallest CPU amount, 0.001 (1m)")
    return round(number, 3)


_BARE_NUMBER_RE = re.compile(r"^[0-9]+(\.[0-9]+)?$")


def unitless_duration(value: object) -> str | None:
    """The message for a duration written as a bare number (7200 or '7200'): it names the fix in seconds at once,
    so the user is not sent from 'quote it' to 'not a valid duration'. None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    text = value.strip() if isinstance(value, str) else f"{value:g}" if isinstance(value, float) else str(value)
    if not _BARE_NUMBER_RE.match(text) or float(text) > MAX_SECONDS:
        return None
    seconds = parse_duration(f"{text}s")
    whole = float(text) == seconds and format_duration(seconds) != f"{text}s"
    same = f" (that is '{format_duration(seconds)}')" if whole else ""
    return (f"{_shown(value)} has no unit: write '{text}s' for {text} seconds{same}, or use m, h or d "
            "(a duration is a number with a unit, e.g. '90s', '45m', '24h')")


DECIMAL_SIZE_UNITS = ("KB", "MB", "GB", "TB")


def decimal_size_advice(value: object, n_bytes: int, minimum: int, enforced: str) -> str | None:
    """For a size written in a decimal unit ('2GB') where only whole MiB can be enforced: says it is decimal and
    names the same number in the binary unit ('2GiB') when that is whole MiB, and the whole MiB just below. None for
    any other size, or when neither fix reaches `minimum`. `enforced` says who counts in MiB ('Docker limits
    memory in whole MiB')."""
    match = _SIZE_RE.match(value.strip()) if isinstance(value, str) else None
    if match is None or match.group(2) not in DECIMAL_SIZE_UNITS:
        return None
    unit = match.group(2)
    digits = value.strip()[: -len(unit)].strip()
    binary_text = f"{digits}{unit[0]}iB"
    fixes = []
    try:
        binary = parse_size(binary_text)
    except UnitError:  # out of range in the binary unit
        binary = 0
    if binary >= minimum and binary % SIZE_UNITS["MiB"] == 0:
        fixes.append(f"{binary_text!r} ({binary:,} bytes)")
    below = n_bytes - n_bytes % SIZE_UNITS["MiB"]
    if below >= minimum:
        fixes.append(f"'{below // SIZE_UNITS['MiB']}MiB' ({below:,} bytes)")
    if not fixes:
        return None
    return f"{value!r} is a decimal size ({n_bytes:,} bytes) and {enforced}: use {' or '.join(fixes)}"


def format_size(n_bytes: int) -> str:
    """The largest binary unit that shows the value exactly, for messages: 9663676416 → '9GiB'."""
    # Capacity × an overcommit ratio is a float; whole bytes keep '8GiB' from showing as '8.0GiB'.
    n_bytes = int(n_bytes)
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if n_bytes and n_bytes % SIZE_UNITS[unit] == 0:
            return f"{n_bytes // SIZE_UNITS[unit]}{unit}"
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if n_bytes >= SIZE_UNITS[unit]:
            return f"{n_bytes / SIZE_UNITS[unit]:.2f}{unit}"
    return f"{n_bytes}B"


def format_duration(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def format_cpus(cpus: float) -> str:
    """Millicore precision without trailing zeros: 1234.567 → '1234.567' (`:g` would say '1234.57')."""
    return f"{cpus:.3f}".rstrip("0").rstrip(".")
