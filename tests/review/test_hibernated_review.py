"""`max_hibernated` in the review (docs/design/ondemand.md, "Hibernated sessions, counted apart"): the reservations
count the places of hibernated sessions' disk but not their memory, the diff's capacity section names the change,
and the preview and the pool's properties say it."""

from __future__ import annotations

import copy
import json

from sandstack.review.capacity import capacity, compare_capacity
from sandstack.spec import load_stack
from sandstack.spec.units import GIB
from sandstack.tooling.cli import main
from testbed.specs import host, spec, write_spec


def _base() -> dict:
    """One host; `agent` (2 CPUs, 4GiB, 8GiB of disk) 1 warm, up to 3 running on demand."""
    hosts = {"node-a": host("ssh://deploy@node-a.example.com", capacity={"cpus": 16, "memory": "64GiB",
                                                                         "disk": "200GiB"},
                            runtime={"token": {"secret": "runtimeToken"}})}
    return spec({"agent": {"base_image": "python:3.12-slim", "limits": {"cpus": 2, "memory": "4GiB", "disk": "8GiB"}}},
                pools={"agent": {"template": "agent", "hosts": ["node-a"], "replicas": 1, "max": 3}}, hosts=hosts)


def _pair(tmp_path, hibernated: int):
    base = _base()
    head = copy.deepcopy(base)
    head["pools"]["agent"]["max_hibernated"] = hibernated
    return (load_stack(write_spec(tmp_path / "base", base)), load_stack(write_spec(tmp_path / "head", head)))


def test_the_places_of_hibernated_sessions_reserve_disk_not_memory(tmp_path):
    report = capacity(*_pair(tmp_path, 5))
    (pool,) = report.pools
    # 3 running at most before and after: memory and CPUs unchanged; 5 places more hold 8GiB of disk each.
    assert (pool.ceiling[0].memory, pool.ceiling[1].memory) == (12 * GIB, 12 * GIB)
    assert (pool.ceiling[0].cpus, pool.ceiling[1].cpus) == (6, 6)
    assert (pool.ceiling[0].disk, pool.ceiling[1].disk) == (24 * GIB, 64 * GIB)
    assert (pool.ceiling[0].sandboxes, pool.ceiling[1].sandboxes) == (3, 3)


def test_the_diff_names_the_change_and_the_preview_says_it(tmp_path, capsys):
    old, new = _pair(tmp_path, 5)
    assert [c.text for c in compare_capacity(old, new) if "hibernated" in c.text] == [
        "hibernated sessions counted apart (max_hibernated) unset (they hold places under max) → 5 per host"]
    assert main(["preview", str(tmp_path / "head" / "stack.yaml"), "--stack", "prod"]) == 0
    out = capsys.readouterr().out
    assert "1 sandboxes, up to 3 on demand, and up to 5 hibernated sessions in places of their own" in out
    assert main(["preview", str(tmp_path / "head" / "stack.yaml"), "--stack", "prod", "--format", "json"]) == 0
    found = json.loads(capsys.readouterr().out)["resources"]
    (pool,) = [r["props"] for r in found if r["kind"] == "pool"]
    assert pool == {"max": 3, "max_hibernated": 5, "replicas": 1}
    runtime = [r["props"]["pools"]["agent"] for r in found if r["kind"] in ("runtime", "runtime reload")
               and "pools" in r["props"]]
    assert [(p["max"], p["max_hibernated"], p["sandboxes"]) for p in runtime] == [(3, 5, 1), (3, 5, 1)]
