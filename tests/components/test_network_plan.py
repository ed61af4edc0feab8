"""Egress mode × published ports → the pool's bridge, the guard's rules, the gateway and proxy variables."""

from __future__ import annotations

import pytest

from components.naming import bridge_name
from components.network_plan import gateway_ports
from tests.components.helpers import NETWORK, env_map, spec

DROP_INPUT = "INPUT -i {br} -m conntrack ! --ctstate ESTABLISHED,RELATED -j DROP"
GATEWAY_IN = "DOCKER-USER -i {br} -o {br} -p tcp --dport {port} -j ACCEPT"
GATEWAY_BACK = "DOCKER-USER -i {br} -o {br} -p tcp --sport {port} -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT"
DROP_NEW_OUT = "DOCKER-USER -i {br} ! -o {br} -m conntrack ! --ctstate ESTABLISHED,RELATED -j DROP"

NETWORKS = {
    "deny-all": {"egress": "deny-all"},
    "allow-list": {"egress": "allow-list", "allow": ["example.com"]},
    "allow-all-logged": {"egress": "allow-all"},
    "allow-all-unlogged": {"egress": "allow-all", "log": False},
}
PUBLISHED = [{"port": 8080, "exposure": "public"}]

# (network, ports?) -> (bridge kind, internal, guard rules for the pool's bridge, uses the gateway)
CASES = {
    ("deny-all", False): ("none-internal", True, [DROP_INPUT], False),
    ("deny-all", True): ("none-routed", False, [DROP_INPUT, DROP_NEW_OUT], False),
    ("allow-list", False): ("gateway-internal", True, [DROP_INPUT, GATEWAY_IN, GATEWAY_BACK], True),
    ("allow-list", True): ("gateway-routed", False, [DROP_INPUT, GATEWAY_IN, GATEWAY_BACK, DROP_NEW_OUT], True),
    ("allow-all-logged", False): ("gateway-internal", True, [DROP_INPUT, GATEWAY_IN, GATEWAY_BACK], True),
    ("allow-all-logged", True): ("gateway-routed", False,
                                 [DROP_INPUT, GATEWAY_IN, GATEWAY_BACK, DROP_NEW_OUT], True),
    ("allow-all-unlogged", False): ("direct-routed", False, [DROP_INPUT], False),
    ("allow-all-unlogged", True): ("direct-routed", False, [DROP_INPUT], False),
}


def _build(build, network: str, ports: bool):
    template = {"base_image": "busybox:1.36", "network": NETWORKS[network]}
    if ports:
        template["ports"] = PUBLISHED
    return build(spec({"p": template}))


@pytest.mark.parametrize("network, ports", list(CASES), ids=[f"{n}-{'ports' if p else 'no-ports'}" for n, p in CASES])
def test_network_guard_rules_gateway_and_proxy_per_egress_mode(build, network, ports):
    kind, internal, rules, via_gateway = CASES[(network, ports)]
    built = _build(build, network, ports)
    br = bridge_name("t", "p", kind)
    port = gateway_ports("t", ["p"])["p"]

    net = built.reg("local-p-net")
    assert net.inputs == {
        "name": "sandstack-t-p", "internal": internal, "driver": "bridge",
        "options": {"com.docker.network.bridge.name": br, "com.docker.network.bridge.enable_icc": "false"},
        "labels": [{"label": "sandstack.host", "value": "local"}, {"label": "sandstack.managed-by", "value": "pulumi"},
                   {"label": "sandstack.stack", "value": "t"}, {"label": "sandstack.pool", "value": "p"}],
    }
    assert net.plan["Internal"] is internal

    guard = env_map(built.reg("local-guard-guard"))
    expected_rules = [r.format(br=br, port=port) for r in rules]
    sandbox = built.container("p-local-0")
    proxy_vars = {k: v for k, v in env_map(sandbox).items() if k.lower() in ("http_proxy", "https_proxy", "no_proxy")}
    if via_gateway:
        egress_br = bridge_name("t", "egress")
        assert guard["SANDSTACK_RULES"].split("\n") == expected_rules + [DROP_INPUT.format(br=egress_br)]
        assert guard["SANDSTACK_BRIDGES"] == " ".join(sorted([br, egress_br]))
        gateway = built.container("local-gateway-proxy")
        assert gateway.inputs["networksAdvanced"] == [
            {"name": "sandstack-t-egress"}, {"name": "sandstack-t-p", "aliases": ["sandstack-gateway"]}]
        assert f"\nhttp_port {port} name=p\n" in env_map(gateway)["SANDSTACK_SQUID_CONF"]
        url = f"http://sandstack-gateway:{port}"
        assert proxy_vars == {"HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url,
                              "NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1"}
        assert sorted(built.names(NETWORK)) == ["local-egress-net", "local-p-net"]
    else:
        assert guard["SANDSTACK_RULES"].split("\n") == expected_rules
        assert guard["SANDSTACK_BRIDGES"] == br
        assert proxy_vars == {}
        assert not [r for r in built.mocks.registrations.values() if "gateway" in r.name]
        assert built.names(NETWORK) == ["local-p-net"]
    assert sandbox.inputs["networksAdvanced"] == [{"name": "sandstack-t-p"}]
    assert "networkMode" not in sandbox.inputs  # network_mode would drop the gateway alias on this daemon


def test_the_egress_network_is_routed_and_only_the_gateway_joins_it(build):
    built = _build(build, "allow-list", False)
    egress = built.reg("local-egress-net")
    assert egress.inputs == {
        "name": "sandstack-t-egress", "internal": False, "driver": "bridge",
        "options": {"com.docker.network.bridge.name": bridge_name("t", "egress"),
                    "com.docker.network.bridge.enable_icc": "true"},
        "labels": [{"label": "sandstack.host", "value": "local"}, {"label": "sandstack.managed-by", "value": "pulumi"},
                   {"label": "sandstack.stack", "value": "t"}, {"label": "sandstack.role", "value": "egress"}],
    }
    joined = [r.name for r in built.mocks.by_type("Container")
              if {"name": "sandstack-t-egress"} in r.inputs.get("networksAdvanced", [])]
    assert joined == ["local-gateway-proxy"]


def test_one_gateway_serves_every_gateway_pool_each_on_its_own_port(build):
    templates = {name: {"base_image": "busybox:1.36", "network": NETWORKS[mode]}
                 for name, mode in [("listed", "allow-list"), ("logged", "allow-all-logged"),
                                    ("closed", "deny-all"), ("direct", "allow-all-unlogged")]}
    built = build(spec(templates))
    ports = gateway_ports("t", ["listed", "logged"])
    assert ports["listed"] != ports["logged"]
    gateway = built.container("local-gateway-proxy")
    assert gateway.inputs["networksAdvanced"] == [
        {"name": "sandstack-t-egress"},
        {"name": "sandstack-t-listed", "aliases": ["sandstack-gateway"]},
        {"name": "sandstack-t-logged", "aliases": ["sandstack-gateway"]},
    ]
    for pool in ("listed", "logged"):
        assert env_map(built.container(f"{pool}-local-0"))["HTTP_PROXY"] == f"http://sandstack-gateway:{ports[pool]}"
    for pool in ("closed", "direct"):
        assert "HTTP_PROXY" not in env_map(built.container(f"{pool}-local-0"))
    assert len([r for r in built.mocks.by_type("Container") if r.name.endswith("-gateway-proxy")]) == 1


def test_gateway_ports_are_stable_when_a_pool_is_added():
    before = gateway_ports("prod", ["python", "browser"])
    after = gateway_ports("prod", ["python", "browser", "scraper", "aaa-first"])
    assert {k: after[k] for k in before} == before
    assert len(set(after.values())) == 4
    assert all(30000 <= p < 40000 for p in after.values())
    assert gateway_ports("prod", ["python"]) == {"python": before["python"]}
    assert gateway_ports("dev", ["python"]) != gateway_ports("prod", ["python"])  # hashed with the stack


def _colliding_pair() -> tuple[str, str, int]:
    """Two pool names whose hashed gateway ports collide (first in name order), and that port."""
    seen: dict[int, str] = {}
    for name in (f"p{i}" for i in range(400)):
        port = gateway_ports("t", [name])[name]
        if port in seen:
            first, second = sorted([seen[port], name])
            return first, second, port
        seen[port] = name
    pytest.fail("no colliding pair among 400 names")


def test_colliding_gateway_ports_probe_to_the_next_free_one():
    first, second, port = _colliding_pair()
    assert gateway_ports("t", [first, second]) == {first: port, second: port + 1}


@pytest.mark.xfail(strict=True, reason="design question: collisions are probed in name order without memory of "
                   "earlier runs, so a new pool that collides and sorts first renumbers (replaces) an existing one")
def test_a_colliding_new_pool_never_renumbers_an_existing_one():
    first, second, port = _colliding_pair()
    assert gateway_ports("t", [second]) == {second: port}
    assert gateway_ports("t", [first, second])[second] == port


def test_adding_a_gateway_pool_keeps_the_existing_pools_proxy_and_rules(build, tmp_path):
    one = {"a": {"base_image": "busybox:1.36", "network": NETWORKS["allow-list"]}}
    two = {**one, "b": {"base_image": "busybox:1.36", "network": NETWORKS["allow-all-logged"]}}
    first = build(spec(one))
    second = build(spec(two))
    assert first.container("a-local-0").inputs["envs"] == second.container("a-local-0").inputs["envs"]
    assert first.reg("local-a-net").inputs == second.reg("local-a-net").inputs
    a_rules = env_map(first.reg("local-guard-guard"))["SANDSTACK_RULES"].split("\n")
    assert set(a_rules) <= set(env_map(second.reg("local-guard-guard"))["SANDSTACK_RULES"].split("\n"))
