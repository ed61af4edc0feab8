"""Proofs on a real Docker engine: no egress mode reaches a private address unless an allow entry names it.

"A private network" is a network namespace behind a veth pair at PRIVATE (10.254.250.2/30, a /30 more specific than
any route of this machine, checked by `Lab.netns`), serving HTTP on 80 and UDP on 53 and 5353: what another Docker
host's API or an sshd on the LAN would be. Its names come from a test DNS server in a second namespace (the stack's
`dns_upstream`), which answers every name with PRIVATE. Pools: `open` (logged allow-all: the gateway), `named`
(logged allow-all naming PRIVATE and db.lab.internal), `listed` (allow-list: the exact db.lab.internal and the
wildcard *.wild.lab.internal), `direct` (allow-all, `log: false`) and `direct-named` (the same, allowing PRIVATE).
"""

from __future__ import annotations

import re

import pytest

from testbed.deploy import engine_spec
from testbed.waiting import wait_until
from tests.engine.net.lab import netns_address
from tests.engine.net.probes import answered, curl, probe, tcp, template, udp
from tests.engine.net.stack import access_log, deployed, logged_sandbox

pytestmark = pytest.mark.docker

PRIVATE = "10.254.250.2"
UPSTREAM = 0  # Lab.netns index of the DNS server


@pytest.fixture(scope="module")
def net(docker_client, debian_image, harness_sweep_orphans, tmp_path_factory):
    spec = engine_spec(debian_image, {
        "open": template(debian_image, {"egress": "allow-all"}),
        "named": template(debian_image, {"egress": "allow-all", "allow": [PRIVATE, "db.lab.internal"]}),
        "listed": template(debian_image, {"egress": "allow-list", "allow": ["db.lab.internal", "*.wild.lab.internal"]}),
        "direct": template(debian_image, {"egress": "allow-all", "log": False}),
        "direct-named": template(debian_image, {"egress": "allow-all", "log": False, "allow": [PRIVATE]}),
    }, dns_upstream=(netns_address(UPSTREAM),))
    pools = {"open": 1, "named": 1, "listed": 1, "direct": 1, "direct-named": 1}
    with deployed(__file__, "pv", tmp_path_factory.mktemp("private"), spec, docker_client, debian_image,
                  pools) as stack:
        stack.extra["upstream"] = stack.lab.netns("upstream", UPSTREAM, [f"dns:53={PRIVATE}"])
        stack.extra["private"] = stack.lab.netns("private", 1, ["tcp:80", "udp:53", "udp:5353"], address=PRIVATE)
        yield stack


def _seen(net, since: int) -> list[str]:
    """What the private server saw since line `since` (its connection lines only)."""
    return [line for line in net.extra["private"].lines()[since:] if line.split()[:1] in (["tcp"], ["udp"])]


def _logged(net, since: int, count: int) -> list[str]:
    return wait_until(lambda: access_log(net)[since:] if len(access_log(net)) >= since + count else None, 10,
                      what=f"{count} access-log lines")


def test_logged_allow_all_refuses_a_private_address_and_a_name_that_resolves_there_and_logs_it(net):
    sandbox, since_seen, since_log = net.sandbox("open"), len(net.extra["private"].lines()), len(access_log(net))
    assert curl(sandbox, f"http://{PRIVATE}/").status == 403
    assert curl(sandbox, f"http://{PRIVATE}:5353/").status == 403  # any port: a sshd's, a Docker API's
    assert curl(sandbox, "http://db.lab.internal/").status == 403  # the name resolves to PRIVATE
    lines = _logged(net, since_log, 3)
    for line, dest in zip(lines, [f"{PRIVATE}:80", f"{PRIVATE}:5353", "db.lab.internal:80"], strict=True):
        assert re.search(rf"host=local pool=open sandbox={logged_sandbox(sandbox.name, net.ip(sandbox))} "
                         rf"client={net.ip(sandbox)} method=GET dest={re.escape(dest)} verdict=TCP_DENIED "
                         r"status=403 ", line), line
    assert _seen(net, since_seen) == []


def test_logged_allow_all_reaches_the_private_address_and_name_its_allow_entries_name(net):
    sandbox, since_seen = net.sandbox("named"), len(net.extra["private"].lines())
    got = curl(sandbox, f"http://{PRIVATE}/")
    assert (got.status, got.body) == (200, f"netns {PRIVATE}")
    got = curl(sandbox, "http://db.lab.internal/")
    assert (got.status, got.body) == (200, "netns db.lab.internal")
    assert [line.split()[:2] + line.split()[3:] for line in _seen(net, since_seen)] == [
        ["tcp", "80", PRIVATE], ["tcp", "80", "db.lab.internal"]]


def test_an_allow_list_reaches_a_private_address_by_an_exact_name_never_by_a_wildcard(net):
    sandbox, since_seen = net.sandbox("listed"), len(net.extra["private"].lines())
    got = curl(sandbox, "http://db.lab.internal/")
    assert (got.status, got.body) == (200, "netns db.lab.internal")
    assert curl(sandbox, "http://x.wild.lab.internal/").status == 403  # anyone adding a subdomain could point it here
    assert [line.split()[3] for line in _seen(net, since_seen)] == ["db.lab.internal"]


def test_a_direct_route_reaches_no_private_address_but_its_dns_and_its_allow_entries(net):
    since = len(net.extra["private"].lines())
    results = probe(net.sandbox("direct"), {"tcp": tcp(PRIVATE, 80), "udp": udp(PRIVATE, 5353),
                                            "dns": udp(PRIVATE, 53)})
    assert not answered({k: v for k, v in results.items() if k != "dns"}), results
    assert results["dns"] == "reply:netns", results  # its resolvers: Docker's DNS forwards from the sandbox
    assert [line.split()[:2] for line in _seen(net, since)] == [["udp", "53"]]
    results = probe(net.sandbox("direct-named"), {"tcp": tcp(PRIVATE, 80), "udp": udp(PRIVATE, 5353)})
    assert results == {"tcp": "connected:netns", "udp": "reply:netns"}, results
