"""Proofs on a real Docker engine: the host guard fails closed while its stack exists, and leaves nothing
behind once the stack is destroyed.

The guard keeps host firewall rules (tagged with the comment `sandstack:<stack>`) and creates each
sandbox's cgroup parent (`/sys/fs/cgroup/<controller>/sandstack/<sandbox>`). Both live outside Docker's
objects, so the harness teardown cannot remove them: the guard must. One stack for the module (a deny-all
and an allow-list pool); the second test destroys it, as `pulumi destroy` would.
"""

from __future__ import annotations

import pytest

from testbed.deploy import engine_spec
from testbed.host_state import guard_rules, sandbox_cgroups
from tests.engine.net.probes import answered, probe, stable_host_addresses, template
from tests.engine.net.stack import deployed
from testbed.waiting import wait_until

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def net(docker_client, debian_image, harness_sweep_orphans, tmp_path_factory):
    spec = engine_spec(debian_image, {
        "deny": template(debian_image, {"egress": "deny-all"}),
        "listed": template(debian_image, {"egress": "allow-list", "allow": ["internet.test"]}),
    })
    with deployed(__file__, "gd", tmp_path_factory.mktemp("guard"), spec, docker_client, debian_image,
                  {"deny": 1, "listed": 1}) as stack:
        stack.extra["listener"] = stack.lab.host_listener()
        yield stack


def guard_running(net) -> bool:
    guard = net.guard
    return guard.attrs["State"]["Running"] and guard.attrs["State"].get("Health", {}).get("Status") == "healthy"


def test_stopped_guard_leaves_its_rules_in_place(net):
    net.proves("Container.networkMode", "Container.capabilities", "Container.restart")
    rules = guard_rules(net.stack)
    # One INPUT drop per bridge (v4 and v6) and, for the allow-list pool and for the gateway on its egress bridge,
    # a logging resolver's port 53 (udp and tcp, v4 only); for the allow-list pool the gateway port pair and its
    # two connection bounds; no link-local for the gateway's egress bridge.
    assert sum(" INPUT " in r and r.startswith("iptables") for r in rules) == 7, rules
    assert sum("--dport 53 " in r and " INPUT " in r for r in rules) == 4, rules
    assert sum(" DOCKER-USER " in r for r in rules) == 5, rules
    assert any(r.startswith("ip6tables") for r in rules), rules
    listener = net.extra["listener"]
    targets = stable_host_addresses() + [net.bridge_gateway("deny")]
    try:
        net.guard.stop(timeout=10)  # a SIGTERM the guard handles: its networks exist, so it keeps everything
        net.guard.reload()
        assert net.guard.attrs["State"]["Status"] == "exited", net.guard.attrs["State"]
        assert "bridge ss-" in net.guard.logs().decode() and "rules and limits stay in place" in net.guard.logs().decode()
        assert sorted(guard_rules(net.stack)) == sorted(rules)
        assert sandbox_cgroups(net.stack), "the sandboxes' cgroup parents went with the guard"
        results = probe(net.sandbox("deny"), listener.probes(targets))  # and the host is still closed
        assert not answered(results), results
        assert listener.peers == []
    finally:
        net.guard.start()
        wait_until(lambda: net.guard.reload() or guard_running(net), 30, what="the guard to be healthy again")
    assert sorted(guard_rules(net.stack)) == sorted(rules)  # re-applied without duplicates


def test_destroyed_stack_leaves_no_guard_rules_or_cgroups(net):
    net.proves("Container.cgroupParent", "Container.destroyGraceSeconds")
    net.guard.reload()
    if not guard_running(net):  # the previous test failed half-way: give this one a running guard
        net.guard.start()
        wait_until(lambda: net.guard.reload() or guard_running(net), 30, what="the guard to be healthy")
    sandboxes = [net.sandbox("deny").name, net.sandbox("listed").name]
    assert guard_rules(net.stack), "nothing to clean up: the guard applied no rules"
    cgroups = sandbox_cgroups(net.stack)
    assert {p.name for p in cgroups} == set(sandboxes), cgroups
    assert (next(p for p in cgroups if p.parent.parent.name == "pids") / "pids.max").read_text().strip() == "64"

    net.harness.destroy()  # `pulumi destroy`: sandboxes, then networks, then the guard (it stops last)

    assert not net.client.containers.list(all=True, filters={"label": f"sandstack.stack={net.stack}"})
    assert guard_rules(net.stack) == []
    assert sandbox_cgroups(net.stack) == []
