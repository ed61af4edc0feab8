"""Size classes in the review (docs/design/sizes.md): the capacity section counts every sandbox at the ceiling at the
pool's largest class, names what changed in its classes, and the preview lists the classes."""

from __future__ import annotations

import copy

from sandstack.review.capacity import CapacityChange, capacity, compare_capacity
from sandstack.spec import load_stack
from sandstack.spec.units import GIB
from sandstack.tooling.cli import main
from testbed.specs import write_spec
from tests.review.test_capacity import _base


def _sized(data: dict) -> None:
    data["pools"]["agent"]["sizes"] = {"large": {"cpus": 4, "memory": "12GiB", "pids": 1024}, "lean": {"cpus": 1}}


def _pair(tmp_path, edit):
    base = _base()
    head = copy.deepcopy(base)
    edit(head)
    return load_stack(write_spec(tmp_path / "base", base)), load_stack(write_spec(tmp_path / "head", head))


def test_the_ceiling_counts_the_largest_class_and_the_warm_sandboxes_their_own_limits(tmp_path):
    old, new = _pair(tmp_path, _sized)
    report = capacity(old, new)
    (pool,) = report.pools
    assert pool.name == "agent"
    assert (pool.warm[0].memory, pool.warm[1].memory) == (16 * GIB, 16 * GIB)  # 2 warm × 2 hosts × 4GiB: unchanged
    assert (pool.ceiling[0].memory, pool.ceiling[1].memory) == (32 * GIB, 96 * GIB)  # 4 × 2 hosts × 12GiB (large)
    assert (pool.ceiling[0].cpus, pool.ceiling[1].cpus) == (16, 32)  # 4 × 2 hosts × 4 CPUs (large)
    assert report.hosts[0].cell("memory") == "8.50GiB (max 16.50GiB → 48.50GiB) of 64GiB"
    assert compare_capacity(old, new) == [
        CapacityChange("agent", "size class large added: 4 CPUs, 12GiB memory, 8GiB disk per sandbox"),
        CapacityChange("agent", "size class lean added: 1 CPUs, 4GiB memory, 8GiB disk per sandbox")]


def test_a_class_raised_is_named_per_sandbox(tmp_path):
    base = _base()
    _sized(base)
    head = copy.deepcopy(base)
    head["pools"]["agent"]["sizes"]["large"]["memory"] = "14GiB"
    old, new = load_stack(write_spec(tmp_path / "b", base)), load_stack(write_spec(tmp_path / "h", head))
    assert compare_capacity(old, new) == [CapacityChange("agent", "size class large: memory 12GiB → 14GiB per sandbox")]


def test_the_preview_lists_the_classes(tmp_path, capsys):
    data = _base()
    _sized(data)
    path = write_spec(tmp_path, data)
    assert main(["preview", str(path), "--stack", "prod"]) == 0
    out = capsys.readouterr().out
    assert "size class large: 4 CPUs, 12GiB memory, 8GiB disk, 1024 pids" in out
    assert "size class lean: 1 CPUs, 4GiB memory, 8GiB disk, 256 pids" in out
