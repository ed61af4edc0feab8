"""The rendered squid.conf (sandstack/plan/squid.py) parses in the infra image's squid, after the gateway's own
preparation (its PREPARE script), for policies of every egress mode."""

from __future__ import annotations

import ipaddress

import pytest

from sandstack.plan.gateway import PREPARE
from sandstack.plan.squid import SELF_ADDRESSES, GatewayPool, render
from sandstack.spec.egress import parse_entry
from sandstack.spec.resolve import EffectiveNetwork
from testbed import images


def _parse_pools() -> list[GatewayPool]:
    def pool(name, port, subnet, egress, allow=(), deny=(), blocked=()):
        network = EffectiveNetwork(egress, tuple(map(parse_entry, allow)), tuple(map(parse_entry, deny)), True)
        return GatewayPool(name, port, network, subnet, str(ipaddress.IPv4Network(subnet)[-2]), blocked)
    return [
        pool("open-web", 32000, "10.213.2.0/23", "allow-all", deny=["169.254.169.254", "tracker.example:443"],
             blocked=("169.254.0.0/16", "fe80::/10", "10.213.0.0/16")),
        pool("agents", 31000, "10.213.0.0/23", "allow-list",
             allow=["example.com", "*.example.org", "10.0.0.0/8:8443", "api.example.net:8080"],
             deny=["bad.example.org", "10.1.0.0/16", "10.2.0.0/16:8443", "*.ads.example.org"]),
        # allow-all's exceptions to its refusal of private destinations: an address, a name with a port, IPv6
        pool("named", 33000, "10.213.4.0/23", "allow-all", allow=["10.0.0.5", "db.internal:5432", "[fd00::7]"]),
    ]


@pytest.mark.docker
def test_squid_parses_the_rendered_config_after_the_gateways_own_preparation(docker_client):
    # The gateway's own preparation first: squid reads the error pages it writes. The configuration is written where
    # the gateway's loop writes a set's SQUID_CONF item (sandstack.plan.gateway.LOOP).
    # Its own addresses too, as the loop writes them before each parse (the `sandstack_self` acl's file).
    script = ('printf "%s" "$SANDSTACK_SQUID_CONF" > /tmp/squid.conf && '
              f"hostname -I | tr -s ' ' '\\n' | grep . > {SELF_ADDRESSES} && " + PREPARE
              + " && squid -k parse -f /tmp/squid.conf && cat /tmp/sandstack-errors/ERR_ACCESS_DENIED")
    result = docker_client.containers.run(
        images.debian_image(docker_client), ["sh", "-c", script], user="proxy",
        environment={"SANDSTACK_SQUID_CONF": render("t", "h1", _parse_pools())},
        remove=True, stdout=True, stderr=True)  # default bridge: with no network squid warns about its hostname
    log = result.decode()
    assert "Processing: http_access deny all" in log
    assert log.endswith("The sandstack gateway refused this request or could not complete it: %c\n"), log[-300:]
    problems = [line for line in log.splitlines() if ("ERROR" in line or "FATAL" in line or "WARNING" in line)
                and "IPv6" not in line  # the test container has no IPv6: squid says so, harmlessly
                and "HTTP requires the use of Via" not in line]  # `via off`, on purpose: Via names the gateway
    assert problems == []


@pytest.mark.docker
def test_squid_parses_a_pool_with_network_profiles(docker_client):
    """The external acl of the network profiles (docs/design/network-profiles.md): its type line, the acls naming it
    with their arguments, and each profile's lines, as squid 5 reads them."""
    from sandstack.spec.resolve import envelope

    open_ = EffectiveNetwork("allow-list", (parse_entry("pypi.org"), parse_entry("*.pythonhosted.org")),
                             (parse_entry("bad.pypi.org"),), True)
    locked = EffectiveNetwork("deny-all", (), (), False)
    profiles = (("open", open_), ("locked", locked))
    pool = GatewayPool("agent-a", 31000, envelope((open_, locked)), "10.213.0.0/23", "10.213.1.254",
                       ("169.254.0.0/16",), "t-agent-a", profiles, "open")
    script = ('printf "%s" "$SANDSTACK_SQUID_CONF" > /tmp/squid.conf && '
              f"hostname -I | tr -s ' ' '\\n' | grep . > {SELF_ADDRESSES} && " + PREPARE
              + " && squid -k parse -f /tmp/squid.conf")
    result = docker_client.containers.run(
        images.debian_image(docker_client), ["sh", "-c", script], user="proxy",
        environment={"SANDSTACK_SQUID_CONF": render("t", "h1", [*_parse_pools(), pool])},
        remove=True, stdout=True, stderr=True)
    log = result.decode()
    assert "Processing: acl agent_a-locked external sandstack_profile agent-a locked open" in log, log[-2000:]
    assert "Processing: http_access deny all" in log
    problems = [line for line in log.splitlines() if ("ERROR" in line or "FATAL" in line or "WARNING" in line)
                and "IPv6" not in line and "HTTP requires the use of Via" not in line]
    assert problems == []
