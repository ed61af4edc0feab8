"""Every deployment runs under a leak guard (testbed/leak_guard.py), and a packet it drops fails the test.

A deployment's guard is in place before its first sandbox starts (over the deployment's whole subnet pool)
and covers every network of the stack after each apply. Here a routed sandbox (allow-all, `log: false`:
direct NAT, the one mode in which a sandbox's packet goes out by the host's default route) sends one UDP
datagram to 198.51.100.1 (TEST-NET-2, a documentation address): the guard drops it in the host's mangle
POSTROUTING, so it never leaves this machine, and the harness's teardown fails with the guard's count. The
datagram is sent only once the guard's rule for that sandbox's source and that route's device is verified in
the firewall.
"""

from __future__ import annotations

import pytest

from testbed.deploy import Deployment, engine_spec
from testbed.harness.harness import Harness
from testbed.harness.teardown import remaining
from testbed.host_state import clear_host_state, iptables_rules, rule_comment
from testbed.leak_guard import LeakDetected, default_route_devices
from testbed.waiting import wait_until
from tests.engine.sandbox_helpers import python

pytestmark = pytest.mark.docker

OUTSIDE = "198.51.100.1"  # TEST-NET-2 (RFC 5737): documentation only, routed by the default route
SEND = f"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'leak', ({OUTSIDE!r}, 9))"


def test_a_packet_a_sandbox_sends_off_this_machine_is_dropped_counted_and_fails_the_teardown(
        debian_image, harness_sweep_orphans, tmp_path):
    if not default_route_devices():
        pytest.skip("this machine has no default route: no packet can leave it, so there is nothing to guard")
    harness = Harness()
    deployment = Deployment(harness, tmp_path)
    template = {"base_image": debian_image, "command": ["sleep", "100000"], "limits": {"memory": "64MiB"},
                "network": {"egress": "allow-all", "log": False}}
    try:
        deployment.up(engine_spec(debian_image, {"direct": template}))
        guard = deployment.leak_guard
        sandbox = deployment.container("direct")
        sandbox.reload()
        source = next(iter(sandbox.attrs["NetworkSettings"]["Networks"].values()))["IPAddress"]
        # In place before anything was sent, and it covers this very packet: never send otherwise.
        assert guard.dropped() == 0
        assert guard.covers(source, OUTSIDE), (source, guard.subnets, guard.devices)
        code, out = python(sandbox, SEND, timeout=20)
        assert code == 0, out
        wait_until(lambda: guard.dropped() >= 1, 20, what="the leak guard to count the datagram")
        assert guard.dropped() == 1
    finally:
        caught = None
        try:
            harness.teardown()
        except LeakDetected as failure:  # anything else fails the test as it is
            caught = failure
        left = remaining(harness.backend.api, harness.session_id)
        host_left = clear_host_state(deployment.stack)
    assert caught is not None, "the teardown did not fail although the leak guard dropped a packet"
    assert str(caught) == (
        f"1 packet from stack {deployment.stack} ({', '.join(guard.subnets)}) tried to leave this machine by "
        f"{', '.join(guard.devices)} (dropped by the leak guard): tests send traffic only to this machine's own "
        f"addresses")
    assert guard.subnets[0] == deployment.subnet_pool  # covered first, before the first apply
    # The teardown removed the stack, the guard's rules and everything else.
    assert [r for r in iptables_rules("mangle", "POSTROUTING") if rule_comment(r) == guard.comment] == []
    assert not left and not host_left, (left, host_left)


def test_a_deployment_that_sends_nothing_out_tears_down_cleanly(debian_image, busybox_image, harness_sweep_orphans,
                                                                 tmp_path):
    harness = Harness()
    deployment = Deployment(harness, tmp_path)
    try:
        deployment.up(engine_spec(debian_image, {"quiet": {"base_image": busybox_image, "command": ["sleep", "9999"],
                                                           "limits": {"memory": "16MiB"}}}))
        guard = deployment.leak_guard
        assert [r for r in iptables_rules("mangle", "POSTROUTING") if rule_comment(r) == guard.comment]
    finally:
        harness.teardown()  # raises LeakDetected if anything was dropped
    assert guard.closed and guard.dropped() == 0
    assert [r for r in iptables_rules("mangle", "POSTROUTING") if rule_comment(r) == guard.comment] == []
    assert not clear_host_state(deployment.stack)
