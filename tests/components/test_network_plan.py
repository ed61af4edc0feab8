"""Egress mode × published ports → the pool's bridge, the guard's rules, the gateway and proxy variables."""

from __future__ import annotations

import hashlib
import ipaddress

import pytest

from sandstack.plan.naming import bridge_name, docker_name, egress_network_name
from sandstack.plan.network import gateway_ports, pool_subnets
from sandstack.spec import SpecError
from sandstack.spec.models.stack import Pool
from tests.components.helpers import NETWORK, env_map, gateway_networks, role_config
from testbed.specs import host, spec

DROP_INPUT = "INPUT -i {br} -m conntrack ! --ctstate ESTABLISHED,RELATED -j DROP"
GATEWAY_IN = "DOCKER-USER -i {br} -o {br} -d {gw}/32 -p tcp --dport {port} -j ACCEPT"
GATEWAY_BACK = ("DOCKER-USER -i {br} -o {br} -s {gw}/32 -p tcp --sport {port} "
                "-m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT")
DROP_NEW_OUT = "DOCKER-USER -i {br} ! -o {br} -m conntrack ! --ctstate ESTABLISHED,RELATED -j DROP"
# Past these, a new connection to the gateway is reset: per pool (mask 0), then per sandbox (mask 32).
GATEWAY_POOL_CAP = ("DOCKER-USER -i {br} -o {br} -d {gw}/32 -p tcp --dport {port} --syn -m connlimit "
                    "--connlimit-above 1024 --connlimit-mask 0 -j REJECT --reject-with tcp-reset")
GATEWAY_SANDBOX_CAP = ("DOCKER-USER -i {br} -o {br} -d {gw}/32 -p tcp --dport {port} --syn -m connlimit "
                       "--connlimit-above 256 --connlimit-mask 32 -j REJECT --reject-with tcp-reset")
GATEWAY = [GATEWAY_IN, GATEWAY_BACK, GATEWAY_POOL_CAP, GATEWAY_SANDBOX_CAP]
NO_METADATA = "DOCKER-USER -i {br} ! -o {br} -d 169.254.0.0/16 -j DROP"
# A direct route opens no connection to a private address (sandstack.spec.egress.PRIVATE_RANGES, IPv4) but to DNS;
# answers to a published port's clients leave.
NO_PRIVATE = [f"DOCKER-USER -i {{br}} ! -o {{br}} -d {c} -m conntrack ! --ctstate ESTABLISHED,RELATED "
              "! --ctorigdstport 53 -j DROP"
              for c in ("0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")]
# A direct route's bounds (the defaults of `network.connections`), refused past them; the guard inserts each rule
# above the ones before it, so the chain checks the open bounds first, then the rates.
REFUSE = "-j REJECT --reject-with icmp-admin-prohibited"
BOUNDS = [
    "DOCKER-USER -i {br} ! -o {br} -m conntrack --ctstate NEW -m hashlimit --hashlimit-above 400/second "
    f"--hashlimit-burst 400 --hashlimit-name sx{{limit}}p {REFUSE}",
    "DOCKER-USER -i {br} ! -o {br} -m conntrack --ctstate NEW -m hashlimit --hashlimit-above 100/second "
    f"--hashlimit-burst 100 --hashlimit-name sx{{limit}}s --hashlimit-mode srcip {REFUSE}",
    f"DOCKER-USER -i {{br}} ! -o {{br}} -m conntrack --ctstate NEW -m connlimit --connlimit-above 4096 "
    f"--connlimit-mask 0 {REFUSE}",
    f"DOCKER-USER -i {{br}} ! -o {{br}} -m conntrack --ctstate NEW -m connlimit --connlimit-above 1024 "
    f"--connlimit-mask 32 {REFUSE}",
]
# A logged pool's sandboxes reach the host's logging resolver on their bridge's address, port 53, and nothing else
# of the host.
RESOLVER = [f"INPUT -i {{br}} -d 10.213.64.1/32 -p {proto} --dport 53 -j ACCEPT" for proto in ("udp", "tcp")]

NETWORKS = {
    "deny-all": {"egress": "deny-all"},
    "allow-list": {"egress": "allow-list", "allow": ["example.com"]},
    "allow-all-logged": {"egress": "allow-all"},
    "allow-all-unlogged": {"egress": "allow-all", "log": False},
}
PUBLISHED = [{"port": 8080, "exposure": "public"}]
# Pool 'p' of stack 't' in the default subnet_pool 10.213.0.0/16: its /23 (hashed from "t/p"), Docker's bridge
# address, the sandboxes' range (the first /24) and the gateway's fixed address (the /23's last usable one).
P_SUBNET, P_BRIDGE, P_RANGE, P_GATEWAY = "10.213.64.0/23", "10.213.64.1", "10.213.64.0/24", "10.213.65.254"
P_IPAM = [{"subnet": P_SUBNET, "gateway": P_BRIDGE, "ipRange": P_RANGE}]
# The gateway's egress network: a /23 no pool holds, hashed from the stack; the host's address on it is the gateway's
# logging resolver.
EGRESS_SUBNET, EGRESS_BRIDGE = "10.213.48.0/23", "10.213.48.1"

# (network, ports?) -> (bridge kind, internal, guard rules for the pool's bridge, uses the gateway)
CASES = {
    ("deny-all", False): ("none-internal", True, [DROP_INPUT], False),
    ("deny-all", True): ("none-routed", False, [DROP_INPUT, DROP_NEW_OUT], False),
    ("allow-list", False): ("gateway-internal", True, [DROP_INPUT, *GATEWAY, *RESOLVER], True),
    ("allow-list", True): ("gateway-routed", False, [DROP_INPUT, *GATEWAY, *RESOLVER, DROP_NEW_OUT], True),
    ("allow-all-logged", False): ("gateway-internal", True, [DROP_INPUT, *GATEWAY, *RESOLVER], True),
    ("allow-all-logged", True): ("gateway-routed", False, [DROP_INPUT, *GATEWAY, *RESOLVER, DROP_NEW_OUT], True),
    ("allow-all-unlogged", False): ("direct-routed", False, [DROP_INPUT, *BOUNDS, NO_METADATA, *NO_PRIVATE], False),
    ("allow-all-unlogged", True): ("direct-routed", False, [DROP_INPUT, *BOUNDS, NO_METADATA, *NO_PRIVATE], False),
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

    net = built.reg("sandstack-local-net.p")
    assert net.inputs == {
        "name": "sandstack-t-p", "internal": internal, "driver": "bridge",
        "options": {"com.docker.network.bridge.name": br, "com.docker.network.bridge.enable_icc": "false"},
        "ipamConfigs": P_IPAM,
        "labels": [{"label": "sandstack.host", "value": "local"}, {"label": "sandstack.managed-by", "value": "pulumi"},
                   {"label": "sandstack.stack", "value": "t"}, {"label": "sandstack.pool", "value": "p"}],
    }
    assert net.plan["Internal"] is internal

    guard = role_config(built, "guard")
    limit = hashlib.sha256(br.encode()).hexdigest()[:12]
    expected_rules = [r.format(br=br, port=port, gw=P_GATEWAY, limit=limit) for r in rules]
    sandbox = built.container("sandstack-p.local-0")
    proxy_vars = {k: v for k, v in env_map(sandbox).items() if k.lower() in ("http_proxy", "https_proxy", "no_proxy")}
    if via_gateway:
        egress_br = bridge_name("t", "egress")
        # The gateway's own logging resolver, on its egress bridge's address: the one host service it reaches.
        assert guard["SANDSTACK_RULES"].split("\n") == expected_rules + [DROP_INPUT.format(br=egress_br)] + [
            f"INPUT -i {egress_br} -d {EGRESS_BRIDGE}/32 -p {proto} --dport 53 -j ACCEPT" for proto in ("udp", "tcp")
        ] + [NO_METADATA.format(br=egress_br)]
        assert guard["SANDSTACK_BRIDGES"] == " ".join(sorted([br, egress_br]))
        gateway = built.container("sandstack-local-gateway-container")
        assert gateway_networks(built) == [
            {"name": "sandstack-t-_egress", "gwPriority": 1000},
            {"name": "sandstack-t-p", "aliases": ["sandstack-gateway"], "ipv4Address": P_GATEWAY}]
        # HAProxy holds the pool's port and hands each connection to squid's own port for it, on loopback.
        squid_line = f"\nhttp_port 127.0.0.1:{port + 20000} name=p require-proxy-header\n"
        assert squid_line in role_config(built, "gateway")["SQUID_CONF"]
        assert f"\nlisten p\n  bind 0.0.0.0:{port}\n  server squid 127.0.0.1:{port + 20000} send-proxy\n" in \
            role_config(built, "gateway")["FRONT_CONF"]
        assert gateway.inputs["dns"] == [EGRESS_BRIDGE]  # Docker's resolver in it forwards there
        # Squid refuses the host's own networks: the subnet_pool but the egress network (carved from it too), and
        # the host's address on the egress network.
        blocked = next(line for line in role_config(built, "gateway")["SQUID_CONF"].split("\n")
                       if line.startswith("acl p_blocked dst "))
        rest = ipaddress.IPv4Network("10.213.0.0/16").address_exclude(ipaddress.IPv4Network(EGRESS_SUBNET))
        assert blocked.endswith(" " + " ".join([*sorted(map(str, rest)), f"{EGRESS_BRIDGE}/32"])), blocked
        assert "10.213.48." not in blocked.replace(f"{EGRESS_BRIDGE}/32", "")
        url = f"http://sandstack-gateway:{port}"
        assert proxy_vars == {"HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url,
                              "NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1"}
        assert sorted(built.names(NETWORK)) == ["sandstack-local-egress-net", "sandstack-local-net.p"]
        assert sandbox.inputs["dns"] == [P_BRIDGE]  # the logging resolver
    else:
        assert guard["SANDSTACK_RULES"].split("\n") == expected_rules
        assert guard["SANDSTACK_BRIDGES"] == br
        assert proxy_vars == {}
        assert not [r for r in built.mocks.registrations.values() if "gateway" in r.name]
        assert built.names(NETWORK) == ["sandstack-local-net.p"]
        assert "dns" not in sandbox.inputs  # Docker's own resolver (unlogged allow-all) or none reachable
    assert sandbox.inputs["networksAdvanced"] == [{"name": "sandstack-t-p"}]
    assert "networkMode" not in sandbox.inputs  # network_mode would drop the gateway alias on this daemon


def test_the_egress_network_is_routed_and_only_the_gateway_joins_it(build):
    built = _build(build, "allow-list", False)
    egress = built.reg("sandstack-local-egress-net")
    assert egress.inputs == {
        "name": "sandstack-t-_egress", "internal": False, "driver": "bridge",
        "options": {"com.docker.network.bridge.name": bridge_name("t", "egress"),
                    "com.docker.network.bridge.enable_icc": "true"},
        "ipamConfigs": [{"subnet": EGRESS_SUBNET, "gateway": EGRESS_BRIDGE}],
        "labels": [{"label": "sandstack.host", "value": "local"}, {"label": "sandstack.managed-by", "value": "pulumi"},
                   {"label": "sandstack.stack", "value": "t"}, {"label": "sandstack.role", "value": "egress"}],
    }
    joined = [r.name for r in built.mocks.by_type("Container")
              if {"name": "sandstack-t-_egress", "gwPriority": 1000} in r.inputs.get("networksAdvanced", [])]
    assert joined == ["sandstack-local-gateway-container"]


def test_one_gateway_serves_every_gateway_pool_each_on_its_own_port(build):
    templates = {name: {"base_image": "busybox:1.36", "network": NETWORKS[mode]}
                 for name, mode in [("listed", "allow-list"), ("logged", "allow-all-logged"),
                                    ("closed", "deny-all"), ("direct", "allow-all-unlogged")]}
    built = build(spec(templates))
    ports = gateway_ports("t", ["listed", "logged"])
    assert ports["listed"] != ports["logged"]
    # On each gateway pool's network the gateway holds that /23's last usable address (listed: 10.213.98.0/23,
    # logged: 10.213.190.0/23); it does not join the networks of the other pools.
    assert gateway_networks(built) == [
        {"name": "sandstack-t-_egress", "gwPriority": 1000},
        {"name": "sandstack-t-listed", "aliases": ["sandstack-gateway"], "ipv4Address": "10.213.99.254"},
        {"name": "sandstack-t-logged", "aliases": ["sandstack-gateway"], "ipv4Address": "10.213.191.254"},
    ]
    for pool in ("listed", "logged"):
        assert env_map(built.container(f"sandstack-{pool}.local-0"))["HTTP_PROXY"] == \
            f"http://sandstack-gateway:{ports[pool]}"
    for pool in ("closed", "direct"):
        assert "HTTP_PROXY" not in env_map(built.container(f"sandstack-{pool}.local-0"))
    assert len([r for r in built.mocks.by_type("Container") if r.name.endswith("-gateway-container")]) == 1


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


def test_a_colliding_new_pool_never_renumbers_an_existing_one():
    first, second, port = _colliding_pair()
    assert gateway_ports("t", [second]) == {second: port}
    # The first allocation, as the address lock holds it, is the second one's memory: the new pool, which collides
    # and sorts first, probes past it (without the lock it would take `port`, tested above).
    assert gateway_ports("t", [first, second], kept=gateway_ports("t", [second])) == {first: port + 1, second: port}


# --- pool subnets: one /23 of the host's subnet_pool per pool ---------------------------------------------

FOUR_POOLS = {name: {"base_image": "busybox:1.36", "network": NETWORKS[mode]}
              for name, mode in [("listed", "allow-list"), ("logged", "allow-all-logged"),
                                 ("closed", "deny-all"), ("direct", "allow-all-unlogged")]}


def _ipam(subnet: str, bridge: str, sandboxes: str) -> list[dict]:
    return [{"subnet": subnet, "gateway": bridge, "ipRange": sandboxes}]


def test_each_pool_network_gets_its_own_23_of_the_hosts_subnet_pool(build):
    built = build(spec(FOUR_POOLS, hosts={"local": host(subnet_pool="172.30.0.0/20")}))
    # Docker's bridge takes the /23's first address; sandboxes are given addresses from its first /24 only.
    assert {r.name: r.inputs.get("ipamConfigs") for r in built.mocks.by_type(NETWORK)} == {
        "sandstack-local-net.closed": _ipam("172.30.4.0/23", "172.30.4.1", "172.30.4.0/24"),
        "sandstack-local-net.direct": _ipam("172.30.8.0/23", "172.30.8.1", "172.30.8.0/24"),
        "sandstack-local-net.listed": _ipam("172.30.2.0/23", "172.30.2.1", "172.30.2.0/24"),
        "sandstack-local-net.logged": _ipam("172.30.14.0/23", "172.30.14.1", "172.30.14.0/24"),
        # The gateway's way out: a /23 no pool holds (the stack's hash probing past them); its bridge address is the
        # gateway's logging resolver.
        "sandstack-local-egress-net": [{"subnet": "172.30.0.0/23", "gateway": "172.30.0.1"}],
    }


def test_the_gateway_has_the_last_usable_address_of_each_gateway_pool_network(build):
    built = build(spec(FOUR_POOLS, hosts={"local": host(subnet_pool="172.30.0.0/20")}))
    # Outside the sandboxes' /24, so no sandbox can hold it; the guard's rules name it (below).
    assert gateway_networks(built) == [
        {"name": "sandstack-t-_egress", "gwPriority": 1000},
        {"name": "sandstack-t-listed", "aliases": ["sandstack-gateway"], "ipv4Address": "172.30.3.254"},
        {"name": "sandstack-t-logged", "aliases": ["sandstack-gateway"], "ipv4Address": "172.30.15.254"},
    ]
    # squid refuses a pool's port to any source outside that pool's /23.
    conf = role_config(built, "gateway")["SQUID_CONF"].split("\n")
    assert [line for line in conf if " src " in line or "_src" in line] == [
        "acl sandstack_front src 127.0.0.1",  # HAProxy, the one source squid takes a PROXY header from
        "acl listed_src src 172.30.2.0/23", "http_access deny listed_from !listed_src",
        "acl logged_src src 172.30.14.0/23", "http_access deny logged_from !logged_src",
    ]


def test_the_guard_opens_each_gateway_pool_bridge_to_its_gateway_address_and_port_only(build):
    built = build(spec(FOUR_POOLS, hosts={"local": host(subnet_pool="172.30.0.0/20")}))
    ports = gateway_ports("t", ["listed", "logged"])
    listed, logged = bridge_name("t", "listed", "gateway-internal"), bridge_name("t", "logged", "gateway-internal")
    back = "-m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT"
    rules = role_config(built, "guard")["SANDSTACK_RULES"].split("\n")
    assert [r for r in rules if " -o " in r and " ! -o " not in r and "connlimit" not in r] == [
        f"DOCKER-USER -i {listed} -o {listed} -d 172.30.3.254/32 -p tcp --dport {ports['listed']} -j ACCEPT",
        f"DOCKER-USER -i {listed} -o {listed} -s 172.30.3.254/32 -p tcp --sport {ports['listed']} {back}",
        f"DOCKER-USER -i {logged} -o {logged} -d 172.30.15.254/32 -p tcp --dport {ports['logged']} -j ACCEPT",
        f"DOCKER-USER -i {logged} -o {logged} -s 172.30.15.254/32 -p tcp --sport {ports['logged']} {back}",
    ]


def test_the_sandboxes_range_holds_the_most_replicas_a_pool_may_have_and_never_the_gateway(build):
    # 250 of them fit the helper's roomy host; 112MiB holds the built-in /tmp and /dev/shm (rule writable-memory).
    tiny = {"cpus": 0.1, "memory": "112MiB", "disk": "64MiB"}
    built = build(spec({"p": {"base_image": "busybox:1.36", "network": NETWORKS["allow-list"], "limits": tiny}},
                       pools={"p": {"template": "p", "hosts": ["local"], "replicas": 250}}))
    [ipam] = built.reg("sandstack-local-net.p").inputs["ipamConfigs"]
    sandbox_range = ipaddress.IPv4Network(ipam["ipRange"])
    # The /24 less its network and broadcast addresses and the bridge's own: 253 for at most 250 sandboxes.
    free = set(sandbox_range.hosts()) - {ipaddress.IPv4Address(ipam["gateway"])}
    assert (len(free), Pool.model_fields["replicas"].metadata[-1].le) == (253, 250)
    assert len([r for r in built.mocks.by_type("Container") if r.name.startswith("sandstack-p.local-")]) == 250
    pool_net = gateway_networks(built)[1]
    gateway_ip = ipaddress.IPv4Address(pool_net["ipv4Address"])
    assert gateway_ip in ipaddress.IPv4Network(ipam["subnet"]) and gateway_ip not in sandbox_range


def test_pool_subnets_are_stable_when_a_pool_is_added():
    before = pool_subnets("prod", ["python", "browser"], "10.213.0.0/16")
    after = pool_subnets("prod", ["python", "browser", "scraper", "aaa-first"], "10.213.0.0/16")
    assert before == {"python": ipaddress.IPv4Network("10.213.16.0/23"),
                      "browser": ipaddress.IPv4Network("10.213.110.0/23")}
    assert after == {**before, "scraper": ipaddress.IPv4Network("10.213.242.0/23"),
                     "aaa-first": ipaddress.IPv4Network("10.213.40.0/23")}
    assert pool_subnets("t", ["python"], "10.213.0.0/16") != {"python": before["python"]}  # hashed with the stack


def test_adding_a_pool_leaves_the_other_pool_networks_as_they_are(build):
    two = {name: {"base_image": "busybox:1.36", "network": NETWORKS[mode]}
           for name, mode in [("a", "deny-all"), ("b", "allow-list")]}
    first = build(spec(two))
    second = build(spec({**two, "c": {"base_image": "busybox:1.36"}}))
    for pool in ("a", "b"):
        assert first.reg(f"sandstack-local-net.{pool}").inputs == second.reg(f"sandstack-local-net.{pool}").inputs, pool
    assert {r.name: r.inputs["ipamConfigs"][0]["subnet"] for r in second.mocks.by_type(NETWORK)
            if r.name.startswith("sandstack-local-net.")} == {
        "sandstack-local-net.a": "10.213.54.0/23", "sandstack-local-net.b": "10.213.90.0/23",
        "sandstack-local-net.c": "10.213.92.0/23"}


def test_a_22_subnet_pool_holds_two_pools_probing_past_a_collision_to_its_first_23():
    # Both names hash to the /22's second /23; 'b' sorts after 'a', so it probes on and wraps to the first.
    assert pool_subnets("t", ["a", "b"], "192.168.4.0/22") == {"a": ipaddress.IPv4Network("192.168.6.0/23"),
                                                               "b": ipaddress.IPv4Network("192.168.4.0/23")}
    assert pool_subnets("t", ["a"], "192.168.4.0/22") == {"a": ipaddress.IPv4Network("192.168.6.0/23")}


def test_a_small_subnet_pool_is_used_as_given_and_one_pool_too_many_is_refused_before_any_resource(build):
    template = {"base_image": "busybox:1.36"}
    small = {"local": host(subnet_pool="192.168.4.0/22")}
    built = build(spec({"a": template, "b": template}, hosts=small))
    assert {r.name: r.inputs["ipamConfigs"] for r in built.mocks.by_type(NETWORK)} == {
        "sandstack-local-net.a": _ipam("192.168.6.0/23", "192.168.6.1", "192.168.6.0/24"),
        "sandstack-local-net.b": _ipam("192.168.4.0/23", "192.168.4.1", "192.168.4.0/24"),
    }
    # A third pool has no /23 left: the loader refuses the spec, so the program never plans its networks.
    with pytest.raises(SpecError) as refused:
        build(spec({"a": template, "b": template, "c": template}, hosts=small))
    assert [(d.path, d.rule) for d in refused.value.diagnostics] == [("$.hosts.local.subnet_pool", "subnet-pool")]


def _colliding_subnet_pair() -> tuple[str, str, ipaddress.IPv4Network]:
    """Two pool names whose hashed /23s of the default subnet_pool collide (first in name order), and that /23."""
    seen: dict[ipaddress.IPv4Network, str] = {}
    for name in (f"p{i}" for i in range(400)):
        subnet = pool_subnets("t", [name], "10.213.0.0/16")[name]
        if subnet in seen:
            first, second = sorted([seen[subnet], name])
            return first, second, subnet
        seen[subnet] = name
    pytest.fail("no colliding pair among 400 names")


def test_a_colliding_new_pool_never_moves_an_existing_pools_subnet():
    first, second, subnet = _colliding_subnet_pair()
    assert pool_subnets("t", [second], "10.213.0.0/16") == {second: subnet}
    # Without memory the new pool, first in name order, would take `subnet` and move `second` (a /16 holds only 128
    # pool networks, so collisions are common); the first allocation, as the lock holds it, keeps it.
    assert pool_subnets("t", [first, second], "10.213.0.0/16")[first] == subnet
    remembered = pool_subnets("t", [second], "10.213.0.0/16")
    candidates = list(ipaddress.IPv4Network("10.213.0.0/16").subnets(new_prefix=23))
    after = candidates[(candidates.index(subnet) + 1) % len(candidates)]  # where the new one probes to
    assert pool_subnets("t", [first, second], "10.213.0.0/16", kept=remembered) == {first: after, second: subnet}


def test_adding_a_gateway_pool_keeps_the_existing_pools_proxy_and_rules(build, tmp_path):
    one = {"a": {"base_image": "busybox:1.36", "network": NETWORKS["allow-list"]}}
    two = {**one, "b": {"base_image": "busybox:1.36", "network": NETWORKS["allow-all-logged"]}}
    first = build(spec(one))
    second = build(spec(two))
    assert first.container("sandstack-a.local-0").inputs["envs"] == \
        second.container("sandstack-a.local-0").inputs["envs"]
    assert first.reg("sandstack-local-net.a").inputs == second.reg("sandstack-local-net.a").inputs
    a_rules = role_config(first, "guard")["SANDSTACK_RULES"].split("\n")
    assert set(a_rules) <= set(role_config(second, "guard")["SANDSTACK_RULES"].split("\n"))


@pytest.mark.parametrize("pool", ["a", "web", "z9", "a-b"])
def test_the_egress_network_sorts_before_every_pool_network(pool):
    # Docker's default route goes through the routed network whose name sorts first: it must be egress.
    assert sorted([docker_name("dev", pool), egress_network_name("dev")])[0] == egress_network_name("dev")


def test_direct_egress_denies_metadata_and_its_deny_cidrs_in_the_guard(build):
    network = {"egress": "allow-all", "log": False, "deny": ["10.9.0.0/16", "192.0.2.7:5432", "2001:db8::/32"]}
    built = build(spec({"p": {"base_image": "busybox:1.36", "network": network}}))
    br = bridge_name("t", "p", "direct-routed")
    rules = role_config(built, "guard")["SANDSTACK_RULES"].split("\n")
    # IPv6 entries need no rule: sandbox networks have no IPv6 route.
    assert [r for r in rules if r.endswith("-j DROP") and " ! -o " in r and "--ctorigdstport" not in r] == [
        f"DOCKER-USER -i {br} ! -o {br} -d 169.254.0.0/16 -j DROP",
        f"DOCKER-USER -i {br} ! -o {br} -d 10.9.0.0/16 -j DROP",
        f"DOCKER-USER -i {br} ! -o {br} -d 192.0.2.7/32 -p tcp --dport 5432 -j DROP",
        f"DOCKER-USER -i {br} ! -o {br} -d 192.0.2.7/32 -p udp --dport 5432 -j DROP",
    ]


@pytest.mark.parametrize("logged", [False, True], ids=["log-false", "protocols-any"])
def test_direct_egress_refuses_private_addresses_but_dns_and_the_addresses_its_allow_entries_name(build, logged):
    """Every private range is refused a direct route (new connections, but to port 53), less what an allow entry
    names: a /9 leaves the other half of 10.0.0.0/8, one address the networks around it; IPv6 needs no rule."""
    network = {"egress": "allow-all", "allow": ["10.0.0.0/9", "192.168.1.7", "[fd00::5]"],
               **({"protocols": "any"} if logged else {"log": False})}
    built = build(spec({"p": {"base_image": "busybox:1.36", "network": network}}))
    br = bridge_name("t", "p", "direct-routed")
    rules = role_config(built, "guard")["SANDSTACK_RULES"].split("\n")
    refused = ["0.0.0.0/8", "10.128.0.0/9", "100.64.0.0/10", "127.0.0.0/8", "172.16.0.0/12", "192.168.0.0/24",
               "192.168.1.0/30", "192.168.1.4/31", "192.168.1.6/32", "192.168.1.8/29", "192.168.1.16/28",
               "192.168.1.32/27", "192.168.1.64/26", "192.168.1.128/25", "192.168.2.0/23", "192.168.4.0/22",
               "192.168.8.0/21", "192.168.16.0/20", "192.168.32.0/19", "192.168.64.0/18", "192.168.128.0/17"]
    assert [r for r in rules if "--ctorigdstport" in r] == [
        f"DOCKER-USER -i {br} ! -o {br} -d {c} -m conntrack ! --ctstate ESTABLISHED,RELATED ! --ctorigdstport 53 "
        "-j DROP" for c in refused]


def test_an_explicit_metadata_opt_in_drops_the_link_local_rule(build):
    network = {"egress": "allow-all", "log": False, "allow_metadata": True}
    built = build(spec({"p": {"base_image": "busybox:1.36", "network": network}}))
    assert "169.254.0.0/16" not in role_config(built, "guard")["SANDSTACK_RULES"]
