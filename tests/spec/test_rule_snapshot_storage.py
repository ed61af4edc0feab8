"""Rule `snapshot-storage` (sandstack.spec.rules.storage): the pools' snapshot_storage on a host with a runtime, summed,
fits the host's capacity.disk (13 pools × 8GiB validated on a 40GiB host)."""

from __future__ import annotations

from tests.spec.helpers import edit, fixture_text, lines

BASE = fixture_text("rules.yaml")
RUNTIME = ("      disk: 20GiB\n", "      disk: 20GiB\n    runtime:\n      token: {secret: runtimeToken}\n")
MORE_POOLS = ("    replicas: 1\n", "    replicas: 1\n" + "".join(
    f"  web{i}:\n    template: web\n    hosts: [local]\n    replicas: 0\n    max: 0\n" for i in (2, 3)) +
    "  web4:\n    template: web\n    hosts: [local]\n    replicas: 1\n")


def stack(*pairs: tuple[str, str]) -> str:
    text = BASE
    for old, new in pairs:
        text = edit(text, old, new)
    return text


def storage(diagnostics) -> list[str]:
    return [line for d, line in zip(diagnostics, lines(diagnostics)) if d.rule == "snapshot-storage"]


def test_the_pools_are_summed_and_the_defaults_session_counts(check):
    text = stack(RUNTIME, MORE_POOLS, ("  limits: small\n", "  limits: small\n  session: {snapshot_storage: 12GiB}\n"))
    assert storage(check(text)) == [
        "stack.yaml:9:13: $.hosts.local.capacity.disk: the runtime on host 'local' may keep 24GiB of snapshots and "
        "hibernation copies (web: 12GiB, web4: 12GiB: each pool's `session.snapshot_storage`) but its capacity.disk is "
        "20GiB: lower `snapshot_storage` or raise the capacity"]


def test_a_sum_at_the_hosts_disk_passes_and_a_pool_without_sandboxes_keeps_nothing(check):
    text = stack(RUNTIME, MORE_POOLS, ("  limits: small\n", "  limits: small\n  session: {snapshot_storage: 10GiB}\n"))
    assert storage(check(text)) == []  # web and web4: 20GiB; web2 and web3 have no sandbox


def test_a_host_without_a_runtime_keeps_no_snapshots(check):
    text = stack(MORE_POOLS, ("  limits: small\n", "  limits: small\n  session: {snapshot_storage: 1TiB}\n"))
    assert storage(check(text)) == []
