"""Proof on a real Docker engine: logged 'allow-all' with `protocols: any` reaches the outside over any protocol
and every new connection is logged by the host's connection logger (from the guard's NFQUEUE rule, before it passes):
time, pool, sandbox address, destination address and port, protocol. Refused destinations are neither reached
nor logged, and an unlogged pool's connections are not in the log.

"The internet" is a network namespace behind a veth pair (see test_network_allow_all.py), running a TCP server
on 5432 (a database's port, spoken to with a non-HTTP exchange) and a UDP server on 5353.
"""

from __future__ import annotations

import re

import pytest

from testbed.deploy import engine_spec
from tests.engine.net.probes import probe, tcp, template, udp
from tests.engine.net.stack import deployed
from testbed.waiting import wait_until

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def net(docker_client, debian_image, harness_sweep_orphans, tmp_path_factory):
    from tests.engine.net.lab import netns_address

    refused = netns_address(1)
    spec = engine_spec(debian_image, {
        "anyproto": template(debian_image, {"egress": "allow-all", "protocols": "any", "deny": [refused]}),
        "direct": template(debian_image, {"egress": "allow-all", "log": False}),
    })
    with deployed(__file__, "cl", tmp_path_factory.mktemp("connection-log"), spec, docker_client, debian_image,
                  {"anyproto": 1, "direct": 1}) as stack:
        stack.extra["inet"] = stack.lab.netns("inet", 0, ["tcp:5432", "udp:5353"])
        stack.extra["refused"] = stack.lab.netns("refused", 1, ["tcp:5432"])
        yield stack


def _log(net) -> list[str]:
    logger = net.client.containers.get(net.name("logger"))
    code, out = logger.exec_run(["cat", "/var/log/sandstack/connections.log"])
    assert code == 0, out
    return out.decode().splitlines()


def test_every_connection_of_any_protocol_is_logged(net):
    net.proves("Container.networkMode", "Container.capabilities")
    sandbox, inet = net.sandbox("anyproto"), net.extra["inet"]
    env = dict(e.split("=", 1) for e in sandbox.attrs["Config"]["Env"])
    assert not {"HTTP_PROXY", "http_proxy"} & set(env), env  # a direct route, not the gateway
    since = len(_log(net))
    results = probe(sandbox, {"tcp": tcp(inet.ip, 5432), "udp": udp(inet.ip, 5353)})
    assert results == {"tcp": "connected:netns", "udp": "reply:netns"}, results
    source = net.ip(sandbox)
    lines = wait_until(lambda: _log(net)[since:] if len(_log(net)) >= since + 2 else None, 10,
                       what="two connection-log lines")
    for proto, port in (("TCP", 5432), ("UDP", 5353)):
        line = next((line for line in lines if f"PROTO={proto}" in line), None)
        assert line is not None, lines
        # A time stamp, the pool, the sandbox's address, the destination's address and port, the protocol.
        assert re.match(r"^\w{3} [ \d]\d \d\d:\d\d:\d\d ", line), line
        assert "pool=anyproto" in line and f"SRC={source} " in line and f"DST={inet.ip} " in line, line
        assert re.search(rf" DPT={port}( |$)", line), line
    assert len([line for line in lines if "PROTO=TCP" in line]) == 1  # one line per connection, not per packet


def test_refused_destinations_and_unlogged_pools_are_not_in_the_log(net):
    anyproto, direct = net.sandbox("anyproto"), net.sandbox("direct")
    inet, refused = net.extra["inet"], net.extra["refused"]
    since = len(_log(net))
    assert probe(anyproto, {"tcp": tcp(refused.ip, 5432)})["tcp"] in ("timeout", "unreachable"), "refused reached"
    assert probe(direct, {"tcp": tcp(inet.ip, 5432)}) == {"tcp": "connected:netns"}
    # A later logged connection shows the logger was writing all along.
    assert probe(anyproto, {"tcp": tcp(inet.ip, 5432)}) == {"tcp": "connected:netns"}
    lines = wait_until(lambda: _log(net)[since:] or None, 10, what="the logged connection")
    assert all(f"DST={inet.ip} " in line and "pool=anyproto" in line for line in lines), lines


def test_names_are_resolved_by_the_hosts_logging_resolver(net):
    sandbox = net.sandbox("anyproto")
    bridge = net.bridge_gateway("anyproto")
    assert sandbox.attrs["HostConfig"]["Dns"] == [bridge]
    logger = net.client.containers.get(net.name("logger"))

    def dns_log() -> str:
        return logger.exec_run(["cat", "/var/log/sandstack/dns/anyproto.log"]).output.decode()

    # Docker's resolver in the sandbox forwards the lookup to the declared server, from the sandbox's address.
    # A special-use name, which the resolver answers itself (NXDOMAIN) and never sends upstream.
    assert sandbox.exec_run(["getent", "hosts", "lookup-proof.sandstack.test"]).exit_code == 2
    line = wait_until(lambda: next((l for l in dns_log().splitlines()
                                    if "query[A] lookup-proof.sandstack.test from " in l), None), 10,
                      what="the query's line in the resolver's log")
    assert f"from {net.ip(sandbox)}" in line, line
    assert "forwarded lookup-proof.sandstack.test" not in dns_log()  # answered here, never sent upstream
    # The unlogged pool keeps Docker's default resolvers: its lookups are not in this log.
    direct = net.sandbox("direct")
    assert not direct.attrs["HostConfig"]["Dns"]
