"""What the host's logging resolver answers each logged pool (sandstack/plan/resolver.py), without Pulumi: the
dnsmasq options, whose meaning on dnsmasq 2.90 the engine test test_network_resolver.py proves."""

from __future__ import annotations

import pytest

from sandstack.plan.logger import LoggerPlan, Resolver
from sandstack.plan.package_files import CONNECTION_LOGGER_SOURCE
from sandstack.plan.resolver import gateway_options, name_options
from sandstack.spec.egress import parse_entry
from sandstack.spec.resolve import EffectiveNetwork
from tests.components.helpers import role_config
from testbed.specs import spec

UP = "@UPSTREAM@"


def _net(egress: str, allow: list[str] = (), deny: list[str] = ()) -> EffectiveNetwork:
    return EffectiveNetwork(egress, tuple(map(parse_entry, allow)), tuple(map(parse_entry, deny)), True)


def test_allow_list_forwards_exactly_the_allowed_names_as_the_gateway_reads_them():
    options = name_options(_net("allow-list", ["api.example.com", "*.pkgs.example.com", "10.0.0.0/8"]))
    assert options == (
        "--address=/#/",  # every other name: NXDOMAIN
        f"--server=/*.pkgs.example.com/{UP}", "--address=/pkgs.example.com/",  # subdomains, not the apex
        f"--server=/api.example.com/{UP}", "--address=/*.api.example.com/",  # the name, not its subdomains
    )


def test_a_portless_deny_is_never_forwarded_and_wins_over_an_allow():
    options = name_options(_net("allow-list", ["*.example.com", "a.b.example.net", "c.example.org"],
                                ["bad.example.com", "b.example.net", "c.example.org:22"]))
    assert options == (
        "--address=/#/",
        f"--server=/*.example.com/{UP}", "--address=/example.com/",
        # a.b.example.net: refused with its parent; c.example.org: denied on port 22 only, so it resolves
        f"--server=/c.example.org/{UP}", "--address=/*.c.example.org/",
        "--address=/b.example.net/", "--address=/bad.example.com/",
    )


def test_an_exact_name_under_an_allowed_wildcard_keeps_its_subdomains_and_a_wildcard_deny_drops_all():
    assert name_options(_net("allow-list", ["*.example.com", "api.example.com"])) == (
        "--address=/#/", f"--server=/*.example.com/{UP}", "--address=/example.com/",
        f"--server=/api.example.com/{UP}")
    assert name_options(_net("allow-list", ["*.a.example.com"], ["*.example.com"])) == (
        "--address=/#/", "--address=/*.example.com/")


def test_logged_allow_all_forwards_every_name_but_special_use_and_denied_ones():
    assert name_options(_net("allow-all", deny=["ads.example.com", "*.tracker.example.com", "203.0.113.0/24"])) == (
        f"--server={UP}", "--address=/test/", "--address=/invalid/", "--address=/localhost/", "--address=/example/",
        "--address=/ads.example.com/", "--address=/*.tracker.example.com/")


def test_logged_allow_all_forwards_a_special_use_name_an_allow_entry_names_exactly_unless_denied():
    """In allow-all an `allow` entry names a private destination; one under .test is still a name the user chose."""
    options = name_options(_net("allow-all", allow=["db.corp.test", "10.0.0.5", "api.internal", "old.corp.test"],
                                deny=["old.corp.test"]))
    assert options == (
        f"--server={UP}", "--address=/test/", "--address=/invalid/", "--address=/localhost/", "--address=/example/",
        f"--server=/db.corp.test/{UP}", "--address=/old.corp.test/")


def test_the_logger_passes_a_line_per_resolver_and_the_declared_upstream():
    plan = LoggerPlan("t", 2000, ("any",), (Resolver("listed", "10.213.98.1", ("--address=/#/",)),
                                           Resolver("any", "10.213.64.1", (f"--server={UP}",))), ("10.0.0.53",),
                      (("any", "10.213.64.0/23"),))
    assert plan.env == [
        "SANDSTACK_QUEUE=2000", "SANDSTACK_LOGGED_MARK=0x20000000",
        "SANDSTACK_CONNECTION_LOG=/var/log/sandstack/connections.log", "SANDSTACK_DNS_LOG_DIR=/var/log/sandstack/dns",
        f"SANDSTACK_LOG_MAX_BYTES={16 * 1024 * 1024}", "SANDSTACK_LOG_KEEP=3",
        "SANDSTACK_CONFIG_DIR=/run/sandstack/config",
    ]
    # Its resolvers and the pools' sources are its configuration, which it takes in place.
    assert plan.config.items == (
        ("SOURCES", "any 10.213.64.0/23"),
        ("RESOLVERS", f"listed 10.213.98.1 --address=/#/\nany 10.213.64.1 --server={UP}"),
        ("DNS_UPSTREAM", "10.0.0.53"),
    )
    # Healthy while the logger holds its queue (the kernel's list, queue number right-aligned), whatever its pools.
    assert plan.health_test[1] == (
        "test -f /var/log/sandstack/connections.log && grep -Eq '^ *2000 ' /proc/net/netfilter/nfnetlink_queue")
    assert plan.command == ["python3", "-c", CONNECTION_LOGGER_SOURCE.read_text()]


def test_the_gateways_resolver_forwards_what_any_of_its_pools_may_reach():
    listed = _net("allow-list", ["api.example.com", "*.pkgs.example.com"], ["bad.pkgs.example.com"])
    other = _net("allow-list", ["pkgs.example.com"])
    # Only allow-list pools: every name no pool forwards is refused; a name one pool forwards is not refused.
    assert gateway_options([listed, other]) == (
        f"--server=/*.pkgs.example.com/{UP}", f"--server=/api.example.com/{UP}", f"--server=/pkgs.example.com/{UP}",
        "--address=/#/", "--address=/*.api.example.com/", "--address=/bad.pkgs.example.com/")
    # With a logged allow-all pool: every name, but what every allow-all pool refuses (special-use names and
    # their common deny entries); an allow-list pool's name under a special-use name still resolves.
    everything = _net("allow-all", deny=["ads.example.com", "tracker.example.net"])
    also = _net("allow-all", deny=["ads.example.com"])
    tests = _net("allow-list", ["allowed.sandstack.test"])
    assert gateway_options([everything, also, tests]) == (
        f"--server=/allowed.sandstack.test/{UP}", f"--server={UP}",
        "--address=/ads.example.com/", "--address=/example/", "--address=/invalid/", "--address=/localhost/",
        "--address=/test/")


def test_the_gateway_resolves_through_its_logging_resolver_on_the_egress_bridge(build):
    built = build(spec({"listed": {"base_image": "busybox:1.36",
                                   "network": {"egress": "allow-list", "allow": ["example.com"]}}}))
    gateway = built.container("sandstack-local-gateway-container").inputs
    network = next(r for r in built.mocks.by_type("docker:index/network:Network") if r.name.endswith("egress-net"))
    ipam = network.inputs["ipamConfigs"][0]
    assert gateway["dns"] == [ipam["gateway"]]
    resolvers = "\n" + role_config(built, "logger")["RESOLVERS"]
    assert f"\n_gateway {ipam['gateway']} --server=/example.com/{UP} --address=/#/ " in resolvers + " ", resolvers


@pytest.mark.parametrize("egress, expected", [("deny-all", False), ("allow-list", True), ("allow-all", True)])
def test_which_pools_get_a_resolver(build, egress, expected):
    network = {"egress": egress, **({"allow": ["example.com"]} if egress == "allow-list" else {})}
    built = build(spec({"p": {"base_image": "busybox:1.36", "network": network},
                        "direct": {"base_image": "busybox:1.36", "network": {"egress": "allow-all", "log": False}}}))
    assert ("dns" in built.container("sandstack-p.local-0").inputs) is expected
    assert "dns" not in built.container("sandstack-direct.local-0").inputs
    loggers = [r.name for r in built.mocks.by_type("docker:index/container:Container") if "logger" in r.name]
    assert loggers == (["sandstack-local-logger-container", "sandstack-local-logger-reload"] if expected else [])
