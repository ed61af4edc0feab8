"""Proofs on a real Docker engine: a `deny-all` sandbox reaches nothing at all.

One stack for the module: pool `deny` (deny-all, 2 replicas), pool `other` (deny-all) and pool `listed`
(allow-list, so the host has an egress gateway and its egress network). Around it the tests build, on this
machine only: an "internet" server on a network they create (TCP, UDP and DNS, alias `internet.test`), the
same server also on the stack's egress network, a "metadata service" at 169.254.169.254 on a network with
that address, and a TCP and a UDP listener on the host itself bound to 0.0.0.0. Every refusal is checked
from inside the sandbox (`docker exec`) and from outside (the target logs every peer, and saw none), and
every target first answers a control from somewhere allowed to reach it.
"""

from __future__ import annotations

import pytest

from testbed.deploy import engine_spec
from tests.engine.net.lab import log_lines, mark, peers_in
from tests.engine.net.probes import (SANDBOX_PORT, SANDBOX_UDP_PORT, answered, dns, host_dns, host_tcp, probe, resolve,
                                     stable_host_addresses, tcp, template, udp)
from tests.engine.net.stack import deployed

pytestmark = pytest.mark.docker

METADATA_IP = "169.254.169.254"
INTERNET_SPECS = ["tcp:80", "udp:5353", "dns:53"]


@pytest.fixture(scope="module")
def net(docker_client, debian_image, harness_sweep_orphans, tmp_path_factory):
    spec = engine_spec(debian_image, {
        "deny": template(debian_image, {"egress": "deny-all"}),
        "other": template(debian_image, {"egress": "deny-all"}),
        "listed": template(debian_image, {"egress": "allow-list", "allow": ["internet.test"]}),
    }, {
        "deny": {"template": "deny", "hosts": ["local"], "replicas": 2},
        "other": {"template": "other", "hosts": ["local"]},
        "listed": {"template": "listed", "hosts": ["local"]},
    })
    pools = {"deny": 2, "other": 1, "listed": 1}
    with deployed(__file__, "da", tmp_path_factory.mktemp("deny-all"), spec, docker_client, debian_image,
                  pools) as stack:
        lab = stack.lab
        internet = lab.network("internet")
        stack.extra["inet"] = inet = lab.server("inet", internet, INTERNET_SPECS, aliases=["internet.test"])
        lab.attach(inet, stack.name("egress"), aliases=["egress.test"])
        metadata = lab.network("metadata", subnet="169.254.169.252/30", gateway="169.254.169.253")
        stack.extra["meta"] = lab.server("meta", metadata, ["tcp:80", "udp:53"], ip=METADATA_IP)
        stack.extra["listener"] = lab.host_listener()
        stack.extra["client"] = lab.client_container(internet)
        yield stack


def test_deny_all_sandbox_has_no_tcp_or_udp_to_other_networks(net):
    net.proves("Network.internal", "Container.networksAdvanced")
    inet = net.extra["inet"]
    inet.reload()
    addresses = {name: cfg["IPAddress"] for name, cfg in inet.attrs["NetworkSettings"]["Networks"].items()}
    internet_ip = next(ip for name, ip in addresses.items() if name.endswith("-internet"))
    egress_ip = addresses[net.name("egress")]
    # Controls: the server answers on both networks (from its own network, and from the host's bridges).
    client = net.extra["client"]
    assert probe(client, {"c": tcp(internet_ip, 80)})["c"] == "connected:inet"
    assert host_tcp(egress_ip, 80) == "connected:inet"

    before = mark(inet, internet_ip, 80)
    targets = {"internet": internet_ip, "egress": egress_ip}
    for index in (0, 1):
        results = probe(net.sandbox("deny", index), {
            **{f"tcp {k}": tcp(ip, 80) for k, ip in targets.items()},
            **{f"udp {k}": udp(ip, 5353) for k, ip in targets.items()},
        })
        assert not answered(results), results
    assert log_lines(inet)[before:] == [], "the internet server saw the deny-all sandboxes"


def test_deny_all_sandbox_cannot_reach_host_services(net):
    net.proves("Network.options", "Container.networkMode")
    listener = net.extra["listener"]
    # The host's own addresses, and its address on every bridge of this stack (the sandbox's own bridge
    # gateway is the classic way in: Docker filters between networks, not from a container to the host).
    addresses = stable_host_addresses() + [net.bridge_gateway(role) for role in ("deny", "other", "listed", "egress")]
    # Control: the listener answers a container on a network sandstack does not guard.
    control = probe(net.extra["client"], listener.probes([stable_host_addresses()[0]]))
    assert all(r.startswith(("connected", "reply")) for r in control.values()), control
    listener.peers.clear()

    for index in (0, 1):
        results = probe(net.sandbox("deny", index), listener.probes(addresses))
        assert not answered(results), results
    assert listener.peers == [], f"the host's listener was reached: {listener.peers}"


def test_deny_all_sandboxes_cannot_reach_each_other_in_one_pool_or_across_pools(net):
    net.proves("Network.options", "Network.internal", "Container.networksAdvanced")
    boxes = {"deny-0": net.sandbox("deny", 0), "deny-1": net.sandbox("deny", 1),
             "other-0": net.sandbox("other"), "listed-0": net.sandbox("listed")}
    ips = {name: net.ip(box) for name, box in boxes.items()}
    # Controls: each target serves on its network address (the host may reach it: it owns the bridge).
    for name, ip in ips.items():
        assert host_tcp(ip, SANDBOX_PORT) == "connected:sandbox", name
    before = {name: mark(box, ips[name], SANDBOX_PORT) for name, box in boxes.items()}

    for source in ("deny-0", "deny-1"):
        targets = {name: ip for name, ip in ips.items() if name != source}
        results = probe(boxes[source], {
            **{f"tcp {name}": tcp(ip, SANDBOX_PORT) for name, ip in targets.items()},
            **{f"udp {name}": udp(ip, SANDBOX_UDP_PORT) for name, ip in targets.items()},
        })
        assert not answered(results), f"from {source}: {results}"
    for name, box in boxes.items():
        seen = peers_in(log_lines(box)[before[name]:])
        assert not seen & {ips["deny-0"], ips["deny-1"]}, f"{name} saw {seen}"


def test_deny_all_sandbox_cannot_reach_a_metadata_address(net):
    net.proves("Network.internal")
    meta = net.extra["meta"]
    assert host_tcp(METADATA_IP, 80) == "connected:meta"  # control: it answers at that address
    before = mark(meta, METADATA_IP, 80)
    results = probe(net.sandbox("deny"), {"tcp": tcp(METADATA_IP, 80), "udp": udp(METADATA_IP, 53)})
    assert not answered(results), results
    assert log_lines(meta)[before:] == [], "the metadata server saw the sandbox"


def test_deny_all_sandbox_gets_no_dns_answer_from_outside(net):
    net.proves("Network.internal")
    inet = net.extra["inet"]
    inet.reload()
    servers = [cfg["IPAddress"] for cfg in inet.attrs["NetworkSettings"]["Networks"].values()]
    # Control: the DNS server answers on each of its addresses.
    for server in servers:
        assert host_dns(server, "control.internet.test") == "answer:198.51.100.53"
    before = mark(inet, servers[0], 80)

    results = probe(net.sandbox("deny"), {
        # The sandbox's own resolver (Docker's embedded DNS): knows only its own network, forwards nothing out.
        "getaddrinfo internet.test": resolve("internet.test"),
        "getaddrinfo egress.test": resolve("egress.test"),
        "embedded internet.test": dns("127.0.0.11", "internet.test", timeout=6),
        # Straight to the outside DNS server, on each of its networks.
        **{f"direct {server}": dns(server, "direct.internet.test") for server in servers},
    })
    assert not answered(results) and not any(r.startswith("answer") for r in results.values()), results
    assert log_lines(inet)[before:] == [], "the outside DNS server received a query from the sandbox"
    # The embedded resolver still works for the sandbox's own network (it is an isolation, not an outage).
    own = probe(net.sandbox("deny"), {"peer": resolve(net.name("deny", "1"))})["peer"]
    assert own == f"resolved:{net.ip(net.sandbox('deny', 1))}"
