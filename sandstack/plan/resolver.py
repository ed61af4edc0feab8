"""What the host's logging resolver answers each logged pool, as dnsmasq options (plain values).

Every logged pool (allow-list, logged allow-all, `protocols: any`) resolves names through a dnsmasq of its own on
its bridge's address, run by the connection logger (sandstack/plan/logger.py), which logs every query. What it
forwards follows the pool's egress policy, with the gateway's meaning of each entry (sandstack/plan/squid.py):

| policy                    | forwarded upstream                                    | answered NXDOMAIN here      |
|---------------------------|-------------------------------------------------------|-----------------------------|
| allow-list                | exact `allow` names (not their subdomains); a         | every other name            |
|                           | `*.name` entry's subdomains (not the apex)            |                             |
| allow-all (logged)        | every name (and special-use ones an `allow` entry     | special-use names (RFC 6761)|
|                           | names exactly)                                        |                             |
| either                    | —                                                     | names a port-less `deny`    |
|                           |                                                       | entry covers                |

An allow entry that a port-less deny covers is not forwarded (the gateway's deny wins too). A CIDR entry names no
name. dnsmasq picks the longest matching domain, so `--address=/x/` (NXDOMAIN) under a forwarded parent holds, and
`*.x` (which also matches x) gets an NXDOMAIN for its apex. The upstream servers are the host's `dns_upstream`, or the nameservers of the
host's /etc/resolv.conf, read by the entrypoint at start: `UPSTREAM` in an option stands for each of them.

The egress gateway resolves through a logging resolver of its own (`gateway_options`), on the host's address on the
gateway's egress network, so its lookups are logged and checked too, and never go to the host's resolvers directly.
"""

from __future__ import annotations

from sandstack.spec.egress import EgressRule
from sandstack.spec.resolve import EffectiveNetwork

UPSTREAM = "@UPSTREAM@"
# RFC 6761 / RFC 2606 special-use names: never sent upstream unless an allow entry names them.
SPECIAL_USE = ("test", "invalid", "localhost", "example")


def _covers(rule: EgressRule, name: str) -> bool:
    """Whether a port-less deny entry refuses `name` (a domain deny covers its subdomains, `*.x` only those)."""
    if rule.kind == "domain":
        return name == rule.value or name.endswith("." + rule.value)
    return rule.kind == "wildcard" and name.endswith("." + rule.value)


def _refusals(network: EffectiveNetwork) -> list[EgressRule]:
    # A deny with a port refuses that port only: the name still resolves for the others.
    return [r for r in network.deny if r.port is None and r.kind in ("domain", "wildcard")]


def name_options(network: EffectiveNetwork) -> tuple[str, ...]:
    """The dnsmasq options for one logged pool's resolver, in a stable order."""
    refusals = _refusals(network)
    refused = [f"--address=/{'*.' if r.kind == 'wildcard' else ''}{r.value}/" for r in sorted(set(refusals))]
    if network.egress != "allow-list":
        # An allow-all `allow` name (a private destination it may reach) is forwarded even under a special-use name.
        named = sorted({r.value for r in network.allow if r.kind == "domain" and r.value.rsplit(".", 1)[-1]
                        in SPECIAL_USE and not any(_covers(d, r.value) for d in refusals)})
        return (f"--server={UPSTREAM}", *(f"--address=/{name}/" for name in SPECIAL_USE),
                *(f"--server=/{name}/{UPSTREAM}" for name in named), *refused)
    exact = sorted({r.value for r in network.allow if r.kind == "domain"})
    wild = sorted({r.value for r in network.allow if r.kind == "wildcard"})
    options = ["--address=/#/"]  # every name that no option below forwards
    for name in wild:
        # "_" is in no valid name: the probe stands for any subdomain, so a deny of one subdomain keeps the rest.
        if any(_covers(r, "_." + name) for r in refusals):
            continue
        options.append(f"--server=/*.{name}/{UPSTREAM}")
        if name not in exact:
            options.append(f"--address=/{name}/")  # dnsmasq's `*.x` also matches x; the gateway's does not
    for name in exact:
        if any(_covers(r, name) for r in refusals):
            continue
        options.append(f"--server=/{name}/{UPSTREAM}")
        if not any(name == w or name.endswith("." + w) for w in wild):
            options.append(f"--address=/*.{name}/")  # the exact name only, as the gateway allows it
    return (*options, *refused)


GATEWAY_RESOLVER = "_gateway"  # its log's name; never a pool's (pool names start with a letter)


def gateway_options(networks: list[EffectiveNetwork]) -> tuple[str, ...]:
    """The dnsmasq options of the gateway's own logging resolver, which answers the lookups squid makes for every
    gateway pool on the host (squid has one resolver). A name is forwarded when any of those pools' resolvers
    would forward it: squid checks each request against its pool's own policy before it resolves the name, so this
    is a second check, the union of theirs. Refused: what every allow-all pool refuses (special-use names, their
    common deny entries), and with no allow-all pool, every name no pool forwards."""
    per_pool = [name_options(n) for n in networks]
    forwards = {o for options in per_pool for o in options if o.startswith("--server=")}
    open_pools = [options for n, options in zip(networks, per_pool) if n.egress != "allow-list"]
    refusals = [{o for o in options if o.startswith("--address=")} for options in (open_pools or per_pool)]
    refused = set.intersection(*refusals) if open_pools else set.union(*refusals)
    # A domain that one pool forwards is not refused for all (dnsmasq would pick either for the same domain).
    forwarded = {o.split("/")[1] for o in forwards if o.count("/") >= 2}
    return (*sorted(forwards), *sorted(o for o in refused if o.split("/")[1] not in forwarded))
