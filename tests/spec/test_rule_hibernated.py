"""A pool's ceiling of hibernated sessions (`pools.*.max_hibernated`; sandstack.spec.rules.ondemand and
host-capacity): its places hold disk, not memory, so capacity counts memory and CPUs at `max` and disk at every
place; the rule's own cases are in test_rules.py (RULE_CASES 'hibernated-ceiling')."""

from __future__ import annotations

from tests.spec.helpers import edit, fixture_text, lines

BASE = fixture_text("rules.yaml")
RUNTIME = ("      disk: 20GiB\n", "      disk: 20GiB\n    runtime:\n      token: {secret: runtimeToken}\n")


def stack(pool: str, runtime: bool = True) -> str:
    text = edit(edit(BASE, "        host_port: 18080\n", ""), "    replicas: 1\n", "    replicas: 1\n" + pool)
    return edit(text, *RUNTIME) if runtime else text


def test_hibernated_places_count_disk_not_memory(check):
    # web: 512MiB of memory, 256MiB of disk; host: 8GiB, 20GiB. 4 running fit either way (2GiB, 1GiB); 70
    # hibernated places more hold 17.5GiB of disk: 74 × 256MiB = 18.5GiB fits, and memory stays 4 × 512MiB.
    assert lines(check(stack("    max: 4\n    max_hibernated: 70\n"))) == []
    # 80 more: 84 × 256MiB = 21GiB of disk does not; memory is still counted at the 4 running only.
    assert lines(check(stack("    max: 4\n    max_hibernated: 80\n"))) == [
        "stack.yaml:9:13: $.hosts.local.capacity.disk: pools on host 'local' need 21GiB of disk (web: 84 × 256MiB) "
        "but capacity 20GiB × overcommit 1 allows 20GiB"]


def test_hibernated_places_need_a_runtime_and_running_places(check):
    assert lines(check(stack("    max_hibernated: 2\n", runtime=False))) == [
        "stack.yaml:46:9: $.pools.web.hosts[0]: pool 'web' has 2 on-demand places for hibernated sessions "
        "(max_hibernated), but host 'local' declares no runtime (`hosts.local.runtime`), which creates them",
        "stack.yaml:48:21: $.pools.web.max_hibernated: max_hibernated 2 counts sessions hibernated in on-demand "
        "places, but pool 'web' runs none (max 1 is its replicas): raise max above replicas, or leave "
        "max_hibernated out"]
