"""Proofs on a real Docker engine: `allow-all` reaches the outside, and still nothing of this host.

One stack for the module: pool `open` (allow-all, logged: through the gateway; deny `blocked.test`),
pool `direct` (allow-all, `log: false`: a routed bridge with direct NAT), 2 replicas each, and pool `deny`
(deny-all) as one more neighbour. "The internet" is, on this machine: a test server on the stack's egress
network (aliases `internet.test`, `blocked.test`, reachable by the gateway), and a network namespace behind
a veth pair at an address the test picks (198.18.x.2), which is what a routed sandbox reaches through the
host's forwarding path, exactly like a real outside address (Docker isolates its bridges from each other,
so a container network could not stand in for it).
"""

from __future__ import annotations

import re

import pytest

from testbed.deploy import engine_spec
from tests.engine.net.lab import log_lines, mark
from tests.engine.net.probes import (SANDBOX_PORT, SANDBOX_UDP_PORT, answered, curl, http, probe, stable_host_addresses,
                                     tcp, template, udp)
from tests.engine.net.stack import access_log, deployed, logged_sandbox, wait_logged_by_name
from testbed.waiting import wait_until

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def net(docker_client, debian_image, harness_sweep_orphans, tmp_path_factory):
    spec = engine_spec(debian_image, {
        "open": template(debian_image, {"egress": "allow-all", "deny": ["blocked.test"]}),
        "direct": template(debian_image, {"egress": "allow-all", "log": False}),
        "deny": template(debian_image, {"egress": "deny-all"}),
    }, {
        "open": {"template": "open", "hosts": ["local"], "replicas": 2},
        "direct": {"template": "direct", "hosts": ["local"], "replicas": 2},
        "deny": {"template": "deny", "hosts": ["local"]},
    })
    with deployed(__file__, "aa", tmp_path_factory.mktemp("allow-all"), spec, docker_client, debian_image,
                  {"open": 2, "direct": 2, "deny": 1}) as stack:
        lab = stack.lab
        stack.extra["web"] = lab.server("web", stack.name("egress"), ["tcp:80"],
                                        aliases=["internet.test", "blocked.test"])
        stack.extra["netns"] = lab.netns("inet", 0, ["tcp:80", "udp:5353"])
        stack.extra["listener"] = lab.host_listener()
        yield stack


def test_allow_all_logged_reaches_any_host_through_the_gateway_and_logs_it(net):
    net.proves("Container.envs", "Container.mounts")
    sandbox, netns = net.sandbox("open"), net.extra["netns"]
    since = len(access_log(net))
    assert curl(sandbox, "http://internet.test/").body == "web internet.test"
    assert curl(sandbox, f"http://{netns.ip}/").body == f"netns {netns.ip}"
    assert curl(sandbox, "http://blocked.test/").status == 403  # a deny entry still holds
    lines = wait_until(lambda: access_log(net)[since:] if len(access_log(net)) >= since + 3 else None, 10,
                       what="three access-log lines")
    expected = [("internet.test", "TCP_MISS", 200), (netns.ip, "TCP_MISS", 200), ("blocked.test", "TCP_DENIED", 403)]
    for line, (dest, verdict, status) in zip(lines, expected, strict=True):
        assert re.search(rf"host=local pool=open sandbox={logged_sandbox(sandbox.name, net.ip(sandbox))} "
                         rf"client={net.ip(sandbox)} method=GET dest={re.escape(dest)}:80 verdict={verdict} "
                         rf"status={status} ", line), line
    wait_until(lambda: all(line in net.gateway.logs().decode() for line in lines), 10, what="docker logs lines")
    wait_logged_by_name(net, sandbox, "http://internet.test/")


def test_allow_all_logged_has_no_direct_route(net):
    net.proves("Network.internal")
    sandbox, netns = net.sandbox("open"), net.extra["netns"]
    since = len(netns.lines())
    got = curl(sandbox, f"http://{netns.ip}/", "--noproxy", "*", timeout=3)
    assert got.status == 0, got
    results = probe(sandbox, {"tcp": tcp(netns.ip, 80), "udp": udp(netns.ip, 5353)})
    assert not answered(results), results
    assert netns.lines()[since:] == []


def test_allow_all_unlogged_connects_directly_over_tcp_and_udp(net):
    net.proves("Network.internal", "Container.networksAdvanced")
    sandbox, netns = net.sandbox("direct"), net.extra["netns"]
    env = dict(e.split("=", 1) for e in sandbox.attrs["Config"]["Env"])
    assert not {"HTTP_PROXY", "http_proxy", "HTTPS_PROXY"} & set(env), env
    since_log, since_ns = len(access_log(net)), len(netns.lines())
    assert curl(sandbox, f"http://{netns.ip}/").body == f"netns {netns.ip}"
    results = probe(sandbox, {"tcp": tcp(netns.ip, 80), "udp": udp(netns.ip, 5353)})
    assert results == {"tcp": "connected:netns", "udp": "reply:netns"}, results
    # It arrived over the host's forwarding path (masqueraded to the host's veth address), bypassing the
    # gateway, which logged nothing: `log: false` means exactly that.
    assert {line.split()[2] for line in netns.lines()[since_ns:] if line[:3] in ("tcp", "udp")} == {netns.host_ip}
    assert access_log(net)[since_log:] == []


@pytest.mark.parametrize("pool", ["open", "direct"])
def test_allow_all_sandbox_cannot_reach_other_sandboxes_or_host_services(net, pool):
    net.proves("Network.options", "Container.networkMode")
    listener = net.extra["listener"]
    source = net.sandbox(pool, 0)
    targets = {f"{p}-{i}": net.sandbox(p, i) for p, i in [(pool, 1), ("open" if pool == "direct" else "direct", 0),
                                                          ("deny", 0)]}
    ips = {name: net.ip(box) for name, box in targets.items()}
    before = {name: mark(box, ips[name], SANDBOX_PORT) for name, box in targets.items()}
    hosts = stable_host_addresses() + [net.bridge_gateway(r) for r in ("open", "direct", "deny", "egress")]
    probes = {**{f"tcp {n}": tcp(ip, SANDBOX_PORT) for n, ip in ips.items()},
              **{f"udp {n}": udp(ip, SANDBOX_UDP_PORT) for n, ip in ips.items()},
              **listener.probes(hosts)}
    if pool == "open":
        # Through the gateway too: it must not become a way to another sandbox or to the host.
        probes.update({f"via gateway {n}": http(f"http://{ip}:{SANDBOX_PORT}/") for n, ip in ips.items()})
        probes.update({f"via gateway host {a}": http(f"http://{a}:{listener.tcp_port}/") for a in hosts})
    results = probe(source, probes)
    assert not answered(results), results
    assert listener.peers == [], f"the host's listener was reached: {listener.peers}"
    for name, box in targets.items():
        assert log_lines(box)[before[name]:] == [], f"{name} was reached from {pool}-0"
