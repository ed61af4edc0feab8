"""Proof on a real Docker engine: logged pools resolve names through the host's logging resolver (a dnsmasq per
pool, run by the connection logger on the pool's bridge address), which logs every query and answers as the
pool's policy says: an allow-list pool only its `allow` names (as the gateway reads them), a logged allow-all pool
every name but special-use ones, both never a name a port-less `deny` covers. A deny-all pool reaches no
resolver, and no pool reaches another pool's.

The upstream is the stack's declared `dns_upstream`: a DNS server in a network namespace behind the host's
routing ("the internet"), answering every name with 198.51.100.53 and logging each query, so the test sees which
names were forwarded and which never left the resolver.
"""

from __future__ import annotations

import pytest

from testbed.deploy import engine_spec
from tests.engine.net.probes import answered, dns, probe, resolve, template
from tests.engine.net.stack import deployed
from testbed.waiting import wait_until

pytestmark = pytest.mark.docker

ANSWER = "resolved:198.51.100.53"
NXDOMAIN = "unresolved:-2"


@pytest.fixture(scope="module")
def net(docker_client, debian_image, harness_sweep_orphans, tmp_path_factory):
    from tests.engine.net.lab import netns_address

    upstream = netns_address(0)
    spec = engine_spec(debian_image, {
        "listed": template(debian_image, {"egress": "allow-list", "allow": ["api.lab.test", "*.pkgs.lab.test"],
                                          "deny": ["bad.pkgs.lab.test"]}),
        "open": template(debian_image, {"egress": "allow-all", "deny": ["ads.lab.internal"]}),
        "closed": template(debian_image, {"egress": "deny-all"}),
    }, dns_upstream=(upstream,))
    with deployed(__file__, "dns", tmp_path_factory.mktemp("resolver"), spec, docker_client, debian_image,
                  {"listed": 1, "open": 1, "closed": 1}) as stack:
        stack.extra["upstream"] = stack.lab.netns("upstream", 0, ["dns:53"])
        yield stack


def _forwarded(net, since: int) -> list[str]:
    """The names the upstream server was asked for since line `since` of its log."""
    return [line.split()[-1] for line in net.extra["upstream"].lines()[since:] if line.startswith("dns ")]


def _resolver_log(net, pool: str) -> str:
    logger = net.client.containers.get(net.name("logger"))
    code, out = logger.exec_run(["cat", f"/var/log/sandstack/dns/{pool}.log"])
    assert code == 0, out
    return out.decode()


def test_an_allow_list_sandbox_resolves_its_allowed_names_only(net):
    net.proves("Container.dns")
    sandbox = net.sandbox("listed")
    assert sandbox.attrs["HostConfig"]["Dns"] == [net.bridge_gateway("listed")]
    since = len(net.extra["upstream"].lines())
    names = ["api.lab.test", "x.pkgs.lab.test", "a.b.pkgs.lab.test",  # allowed
             "pkgs.lab.test", "sub.api.lab.test", "other.lab.test", "bad.pkgs.lab.test", "y.bad.pkgs.lab.test"]
    results = probe(sandbox, {name: resolve(name) for name in names})
    assert results == {**{name: ANSWER for name in names[:3]}, **{name: NXDOMAIN for name in names[3:]}}, results
    # Only the allowed names left the resolver; each query is in the pool's log, from the sandbox's address.
    assert sorted(set(_forwarded(net, since))) == sorted(names[:3])
    log = wait_until(lambda: next((text for text in [_resolver_log(net, "listed")] if "y.bad.pkgs.lab.test" in text),
                                  None), 10, what="the refused query's line")
    for name in names:
        assert f"query[A] {name} from {net.ip(sandbox)}" in log, (name, log)
    assert "config other.lab.test is NXDOMAIN" in log and "forwarded api.lab.test to " in log, log


def test_a_logged_allow_all_sandbox_resolves_every_name_but_special_use_and_denied_ones(net):
    sandbox = net.sandbox("open")
    assert sandbox.attrs["HostConfig"]["Dns"] == [net.bridge_gateway("open")]
    since = len(net.extra["upstream"].lines())
    results = probe(sandbox, {name: resolve(name) for name in
                              ("anything.lab.internal", "ads.lab.internal", "x.ads.lab.internal", "proof.sandstack.test")})
    assert results == {"anything.lab.internal": ANSWER, "ads.lab.internal": NXDOMAIN, "x.ads.lab.internal": NXDOMAIN,
                       "proof.sandstack.test": NXDOMAIN}, results
    assert set(_forwarded(net, since)) == {"anything.lab.internal"}
    assert "query[A] proof.sandstack.test from " in _resolver_log(net, "open")


def test_no_pool_reaches_another_pools_resolver_and_deny_all_reaches_none(net):
    listed, closed = net.sandbox("listed"), net.sandbox("closed")
    assert not closed.attrs["HostConfig"]["Dns"]
    since = len(net.extra["upstream"].lines())
    # The open pool's resolver forwards every name: the listed pool must not use it to get around its list.
    results = probe(listed, {"open's resolver": dns(net.bridge_gateway("open"), "around.lab.internal"),
                             "closed's bridge": dns(net.bridge_gateway("closed"), "around.lab.internal")})
    results.update(probe(closed, {
        "own bridge": dns(net.bridge_gateway("closed"), "closed.lab.internal"),
        "open's resolver": dns(net.bridge_gateway("open"), "closed.lab.internal"),
        "listed's resolver": dns(net.bridge_gateway("listed"), "api.lab.test"),
        "upstream": dns(net.extra["upstream"].ip, "closed.lab.internal"),
    }))
    assert not answered(results), results
    assert _forwarded(net, since) == []
