"""Proofs on a real Docker engine: published ports answer where their exposure says, and nowhere else.

One stack for the module, every sandbox serving TCP 8000 and UDP 8001: pool `loopback` (port 8000 with
exposure `host`), `public` (8000/tcp and 8001/udp with exposure `public`), `hidden` (8000 with exposure
`none`) — all deny-all — and `listedpub` (allow-list, 8000 `public`). Host ports are left to Docker (a
fixed one could collide with whatever else runs here). A "LAN client" is a test container on a network the
test creates: to it the host is just an address, like to another machine. Publishing needs a routed bridge,
so the egress checks use the outside a routed bridge could reach: a network namespace behind a veth pair.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testbed.deploy import Deployment, engine_spec
from testbed.harness.harness import Harness
from tests.engine.net.lab import log_lines, peers_in
from tests.engine.net.probes import (SANDBOX_PORT, SANDBOX_UDP_PORT, answered, curl, host_tcp, probe,
                                     stable_host_addresses, tcp, template, udp)
from tests.engine.net.stack import deployed

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def net(docker_client, debian_image, harness_sweep_orphans, tmp_path_factory):
    def port(exposure: str, protocol: str = "tcp") -> dict:
        return {"port": SANDBOX_UDP_PORT if protocol == "udp" else SANDBOX_PORT, "protocol": protocol,
                "exposure": exposure}

    deny = {"egress": "deny-all"}
    spec = engine_spec(debian_image, {
        "loopback": template(debian_image, deny, ports=[port("host")]),
        "public": template(debian_image, deny, ports=[port("public"), port("public", "udp")]),
        "hidden": template(debian_image, deny, ports=[port("none")]),
        "listedpub": template(debian_image, {"egress": "allow-list", "allow": ["internet.test"]},
                              ports=[port("public")]),
    })
    with deployed(__file__, "po", tmp_path_factory.mktemp("ports"), spec, docker_client, debian_image,
                  {"loopback": 1, "public": 1, "hidden": 1, "listedpub": 1}) as stack:
        lab = stack.lab
        stack.extra["lan"] = lab.client_container(lab.network("lan"))
        stack.extra["web"] = lab.server("web", stack.name("egress"), ["tcp:80"], aliases=["internet.test"])
        stack.extra["netns"] = lab.netns("inet", 1, ["tcp:80", "udp:5353"])
        stack.extra["listener"] = lab.host_listener()
        yield stack


def published(net, pool: str) -> dict:
    box = net.sandbox(pool)
    box.reload()
    return box.attrs["NetworkSettings"]["Ports"] or {}


def output_ports(net, pool: str) -> list[dict]:
    return next(s for s in net.result.outputs["sandboxes"] if s["pool"] == pool)["ports"]


def test_host_exposure_answers_on_the_loopback_address_only(net):
    net.proves("Container.ports", "Container.ports.ip", "Container.ports.internal")
    bindings = published(net, "loopback")
    assert list(bindings) == [f"{SANDBOX_PORT}/tcp"] and len(bindings[f"{SANDBOX_PORT}/tcp"]) == 1, bindings
    binding = bindings[f"{SANDBOX_PORT}/tcp"][0]
    assert binding["HostIp"] == "127.0.0.1", binding
    host_port = int(binding["HostPort"])
    assert output_ports(net, "loopback")[0]["address"] == f"127.0.0.1:{host_port}"

    assert host_tcp("127.0.0.1", host_port) == "connected:sandbox"
    for address in stable_host_addresses():
        assert not host_tcp(address, host_port).startswith("connected"), address
    lan = net.extra["lan"]
    results = probe(lan, {a: tcp(a, host_port) for a in stable_host_addresses()})
    assert not any(r.startswith("connected") for r in results.values()), results
    assert net.ip(lan) not in peers_in(log_lines(net.sandbox("loopback")))


def test_public_exposure_answers_on_every_host_address(net):
    net.proves("Container.ports", "Container.ports.ip", "Container.ports.protocol")
    bindings = published(net, "public")
    assert sorted(bindings) == [f"{SANDBOX_PORT}/tcp", f"{SANDBOX_UDP_PORT}/udp"], bindings
    assert {b["HostIp"] for binding in bindings.values() for b in binding} == {"0.0.0.0"}, bindings
    tcp_port = int(bindings[f"{SANDBOX_PORT}/tcp"][0]["HostPort"])
    udp_port = int(bindings[f"{SANDBOX_UDP_PORT}/udp"][0]["HostPort"])
    assert [p["address"] for p in output_ports(net, "public")] == [f"localhost:{tcp_port}", f"localhost:{udp_port}"]

    for address in ["127.0.0.1", *stable_host_addresses()]:
        assert host_tcp(address, tcp_port) == "connected:sandbox", address
    addresses = stable_host_addresses()
    results = probe(net.extra["lan"], {**{f"tcp {a}": tcp(a, tcp_port) for a in addresses},
                                       **{f"udp {a}": udp(a, udp_port) for a in addresses}})
    assert all(r in ("connected:sandbox", "reply:sandbox") for r in results.values()), results


def test_none_exposure_is_published_nowhere(net):
    net.proves("Container.ports")
    box = net.sandbox("hidden")
    assert published(net, "hidden") == {} and not box.attrs["HostConfig"].get("PortBindings")
    assert output_ports(net, "hidden") == [{"name": None, "port": SANDBOX_PORT, "protocol": "tcp",
                                            "exposure": "none", "address": None}]
    ip = net.ip(box)
    # Nothing on the host forwards to it: no DNAT rule and no docker-proxy names its address.
    nat = subprocess.run(["iptables", "-w", "-t", "nat", "-S"], capture_output=True, text=True, check=True).stdout
    assert f"--to-destination {ip}:" not in nat
    proxies = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert f"-container-ip {ip} " not in proxies
    # It does listen (control), but a client elsewhere cannot reach it.
    assert probe(box, {"self": tcp("127.0.0.1", SANDBOX_PORT)})["self"] == "connected:sandbox"
    results = probe(net.extra["lan"], {"tcp": tcp(ip, SANDBOX_PORT), "udp": udp(ip, SANDBOX_UDP_PORT)})
    assert not answered(results), results


@pytest.mark.parametrize("pool", ["public", "listedpub"])
def test_publishing_a_port_adds_no_egress(net, pool):
    net.proves("Container.ports", "Network.internal")
    netns, listener, lan = net.extra["netns"], net.extra["listener"], net.extra["lan"]
    # A published port needs a routed bridge: the route out exists, only the guard closes it.
    assert net.network(pool).attrs["Internal"] is False
    # Control: a container on a routed network reaches the outside through the same forwarding path.
    assert probe(lan, {"c": tcp(netns.ip, 80)})["c"] == "connected:netns"
    since = len(netns.lines())
    box = net.sandbox(pool)
    results = probe(box, {"tcp outside": tcp(netns.ip, 80), "udp outside": udp(netns.ip, 5353),
                          **listener.probes(stable_host_addresses() + [net.bridge_gateway(pool)])})
    assert not answered(results), results
    got = curl(box, f"http://{netns.ip}/", "--noproxy", "*", timeout=3)
    assert got.status == 0, got
    if pool == "listedpub":
        assert curl(box, "http://internet.test/").body == "web internet.test"  # its allow-list still works
        assert curl(box, f"http://{netns.ip}/").status == 403  # and nothing more
    assert netns.lines()[since:] == [], "the outside saw the sandbox"
    assert listener.peers == []


SAME_PORT_SPEC = """\
version: 1
hosts:
  local:
    endpoint: unix:///var/run/docker.sock
    capacity: {{cpus: 2, memory: 8GiB, disk: 20GiB}}
    infra_image: {image}
templates:
  a:
    base_image: {image}
    ports:
      - {{port: 8000, exposure: public, host_port: 18080}}
  b:
    base_image: {image}
    ports:
      - {{port: 8000, exposure: public, host_port: 18080}}
pools:
{pools}
"""
TWO_POOLS = "  a: {template: a, hosts: [local]}\n  b: {template: b, hosts: [local]}"
TWO_REPLICAS = "  a: {template: a, hosts: [local], replicas: 2}"
HINT = "one sandbox per host can own a fixed port (drop `host_port` to let Docker pick)"


@pytest.mark.parametrize("pools, errors", [
    (TWO_POOLS, [f"11:51: $.templates.a.ports[0].host_port: host port 18080/tcp on host 'local' is claimed by "
                 f"pools 'a', 'b'; {HINT}",
                 f"15:51: $.templates.b.ports[0].host_port: host port 18080/tcp on host 'local' is claimed by "
                 f"pools 'a', 'b'; {HINT}"]),
    (TWO_REPLICAS, [f"11:51: $.templates.a.ports[0].host_port: host port 18080/tcp on host 'local' is claimed by "
                    f"2 replicas of pool 'a'; {HINT}"]),
], ids=["two-pools", "two-replicas"])
def test_two_sandboxes_cannot_claim_the_same_fixed_host_port(debian_image, tmp_path, pools, errors):
    """Refused before anything exists, with the exact message. (Docker itself would create the second
    container and fail to start it: "driver failed programming external connectivity on endpoint ...:
    Bind for 0.0.0.0:18080 failed: port is already allocated", leaving a half-applied stack behind.)"""
    path = tmp_path / "stack.yaml"
    path.write_text(SAME_PORT_SPEC.format(image=debian_image, pools=pools))
    run = subprocess.run([str(Path(sys.executable).parent / "sandstack"), "validate", str(path)],
                         capture_output=True, text=True)
    assert (run.returncode, run.stdout.splitlines()) == (1, [f"{path}:{e}" for e in errors]), run.stderr

    # `pulumi up` loads the spec with the same code: it fails with the same message and creates nothing.
    harness = Harness()
    try:
        failed = Deployment(harness, tmp_path).up(check=False)
        assert failed.error is not None
        assert all(e.split(": ", 1)[1] in str(failed.error) for e in errors), failed.error
        assert failed.actions == [] and not harness.state.entries
    finally:
        harness.teardown()
