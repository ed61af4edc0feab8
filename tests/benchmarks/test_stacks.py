"""The synthetic stacks: each size is a valid spec with exactly the sandboxes it claims."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import stacks
from sandstack.spec import check_file


def sandbox_count(data: dict) -> int:
    return sum(len(pool["hosts"]) * pool["replicas"] for pool in data["pools"].values())


@pytest.mark.parametrize("label", sorted(stacks.SIZES))
def test_each_size_declares_its_number_of_sandboxes(label):
    size = stacks.SIZES[label]
    data = stacks.generate(size)
    assert sandbox_count(data) == size.sandboxes == int(label)
    assert len(data["templates"]) == size.templates
    assert len(data["hosts"]) == size.hosts


def test_sizes_are_the_issues_ten_hundred_thousand():
    assert {label: (s.templates, s.hosts, s.sandboxes) for label, s in stacks.SIZES.items()} == {
        "10": (10, 1, 10), "100": (100, 1, 100), "1000": (100, 10, 1000)}


@pytest.mark.parametrize("label", ["10", "1000"])
def test_generated_base_and_head_validate_without_errors(tmp_path: Path, label):
    base, head = stacks.write_pair(stacks.SIZES[label], tmp_path)
    for path in (base, head):
        result = check_file(path)
        assert result.diagnostics == [], [d.text() for d in result.diagnostics]
        assert result.stack is not None


def test_head_changes_every_templates_cpus_and_nothing_else_of_templates():
    data = stacks.generate(stacks.SIZES["10"])
    head = stacks.changed(data)
    assert head["pools"] == data["pools"]
    for name, template in head["templates"].items():
        original = data["templates"][name]
        assert template["limits"]["cpus"] != original["limits"]["cpus"]
        assert {**template, "limits": original["limits"]} == original


def test_templates_cover_every_egress_mode_ports_and_snapshots():
    templates = stacks.generate(stacks.SIZES["10"])["templates"].values()
    assert {t["network"]["egress"] for t in templates} == set(stacks.EGRESS)
    assert any("ports" in t for t in templates) and any("snapshot" in t for t in templates)


def test_pools_spread_over_hosts_when_they_use_fewer_than_all():
    size = stacks.Size("x", templates=4, hosts=4, hosts_per_pool=1, replicas=2)
    data = stacks.generate(size)
    assert sorted(p["hosts"][0] for p in data["pools"].values()) == ["h0", "h1", "h2", "h3"]
    assert sandbox_count(data) == size.sandboxes == 8
