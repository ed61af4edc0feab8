"""Property-based: any text, bytes or mutated spec yields diagnostics (never an exception); units round-trip."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandstack.spec import check_file
from sandstack.spec.loader import parse
from sandstack.spec.units import (
    MAX_BYTES,
    MAX_SECONDS,
    SIZE_UNITS,
    format_cpus,
    format_duration,
    format_size,
    parse_cpus,
    parse_duration,
    parse_size,
)
from tests.spec.helpers import STACKS

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """One folder for every example, with the dev stack's snapshot file next to where specs are written."""
    root = tmp_path_factory.mktemp("props")
    shutil.copytree(STACKS / "files", root / "files")
    return root


def assert_only_diagnostics(path: Path) -> list:
    """check_file returns (never raises) and every diagnostic is one located line."""
    result = check_file(path, "spec.yaml")
    for d in result.diagnostics:
        assert d.file == "spec.yaml"
        assert d.line >= 1 and d.column >= 1, d
        assert d.path.startswith("$"), d
        assert d.message and "\n" not in d.message and "\r" not in d.message, d
        assert d.rule, d
    assert (result.stack is None) == bool(result.diagnostics)
    return result.diagnostics


# Pieces of YAML syntax, so random text reaches the parser's corners rather than failing on byte one.
YAML_TOKENS = [
    "version: 1", "hosts:", "templates:", "pools:", "profiles:", "defaults:", "limits:", "network:", "egress:",
    "  ", "    ", "\t", "\n", "- ", ": ", ":", "? ", "[", "]", "{", "}", ",", "&a ", "*a", "&b ", "*b", "<<: ",
    "!!python/object/apply:os.system ", "!!str ", "!!int ", "!!binary ", "!tag ", "---\n", "...\n", "'", '"',
    "\\", "#", "|\n", ">\n", "%YAML 1.2\n", "%TAG ! tag:x,2000:\n", "~", "null", "yes", "0x1F", "0o17", "1e999",
    "9" * 30, "512MiB", "1.5", "-", "*", "*.com", "\x00", "\x07", "\x1b", "\ufeff", "\ufffe", "é", "😀", "\u2028",
]
yamlish = st.lists(st.sampled_from(YAML_TOKENS) | st.text(max_size=6), max_size=60).map("".join)


@FAST
@given(text=yamlish)
def test_random_yaml_text_only_yields_diagnostics(folder: Path, text: str) -> None:
    path = folder / "spec.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    assert_only_diagnostics(path)


@FAST
@given(data=st.binary(max_size=400))
def test_random_bytes_only_yield_diagnostics(folder: Path, data: bytes) -> None:
    path = folder / "spec.yaml"
    path.write_bytes(data)
    assert_only_diagnostics(path)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
    | st.sampled_from(["512MiB", "1.5", "500m", "90s", "deny-all", "allow-list", "*.com", "unix:///x", "small"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)


def _paths(node: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, prefix + (i,))
    return out


def _get(node: object, path: tuple) -> object:
    for part in path:
        node = node[part]  # type: ignore[index]
    return node


@st.composite
def mutated_stack(draw) -> object:
    """A committed stack with 1-4 random mutations: drop, retype, add unknown keys, nest deep."""
    name = draw(st.sampled_from(["dev.yaml", "prod.yaml"]))
    data = parse((STACKS / name).read_text(encoding="utf-8"), name).data
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(data)
        path = draw(st.sampled_from(paths))
        kind = draw(st.sampled_from(["drop", "replace", "unknown-key", "nest", "duplicate-list-item"]))
        if not path:
            if kind == "replace":
                data = draw(json_values)
            continue
        parent, last = _get(data, path[:-1]), path[-1]
        if kind == "drop":
            if isinstance(parent, dict):
                del parent[last]
            else:
                parent.pop(last)
        elif kind == "replace":
            parent[last] = draw(json_values)
        elif kind == "unknown-key":
            target = parent[last]
            if isinstance(target, dict):
                target[draw(st.text(min_size=1, max_size=10))] = draw(json_values)
            else:
                parent[last] = {draw(st.text(min_size=1, max_size=10)): target}
        elif kind == "nest":
            value = parent[last]
            for _ in range(draw(st.integers(1, 80))):
                value = draw(st.sampled_from([[value], {"x": value}]))
            parent[last] = value
        elif isinstance(parent, list):
            parent.append(parent[last])
    return data


@FAST
@given(data=mutated_stack())
def test_mutated_stacks_only_yield_diagnostics(folder: Path, data: object) -> None:
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    assert_only_diagnostics(path)


@FAST
@given(data=mutated_stack())
def test_mutated_stacks_in_flow_style_only_yield_diagnostics(folder: Path, data: object) -> None:
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, default_flow_style=True, width=60), encoding="utf-8")
    assert_only_diagnostics(path)


BINARY_UNITS = ["KiB", "MiB", "GiB", "TiB"]


@settings(max_examples=300, deadline=None)
@given(k=st.integers(1, 1023), unit=st.sampled_from(BINARY_UNITS))
def test_exact_binary_sizes_round_trip(k: int, unit: str) -> None:
    n = k * SIZE_UNITS[unit]
    assert parse_size(format_size(n)) == n
    assert format_size(parse_size(f"{k}{unit}")) == f"{k}{unit}"


@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, MAX_BYTES))
def test_any_size_formats_to_within_half_a_percent(n: int) -> None:
    assert parse_size(n) == n
    assert parse_size(f"{n}B") == n
    back = parse_size(format_size(n))
    assert abs(back - n) <= n * 0.005 + 1


@settings(max_examples=300, deadline=None)
@given(seconds=st.integers(0, MAX_SECONDS))
def test_durations_round_trip(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


@settings(max_examples=300, deadline=None)
@given(millicores=st.integers(1, 4_096_000))
def test_cpus_round_trip_at_millicore_precision(millicores: int) -> None:
    cpus = parse_cpus(f"{millicores}m")
    assert cpus == round(millicores / 1000, 3)
    assert parse_cpus(format_cpus(cpus)) == cpus
