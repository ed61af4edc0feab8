"""Network policy (egress) and exposed ports of a sandbox."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import StringConstraints, WithJsonSchema

from sandstack.spec.access import AS_FIELDS, NEVER, loosens
from sandstack.spec.contract import URL_AUTH_COOKIE, URL_AUTH_HEADER, URL_AUTH_QUERY
from sandstack.spec.egress import METADATA_RANGES, PRIVATE_RANGES
from sandstack.spec.changes import (DIRECT_ROUTE, NONE, PROFILE_NAMES_KEPT, ROUTE_KEPT, ROUTING, SETUP_GATEWAY,
                                     UNLOGGED_ALLOW_ALL, URL_AND_ROUTING, URL_PORT,
                                     URL_PORTS_CHANGE, Effect)
from sandstack.spec.models.base import Name, StrictModel, field

EGRESS_MODES = ("deny-all", "allow-list", "allow-all")
EgressMode = Literal["deny-all", "allow-list", "allow-all"]

# The schema only bounds the shape; the exact grammar (labels, CIDR prefixes, ports, too-broad
# wildcards) is checked by `sandstack.spec.egress`, which also gives the precise message.
EGRESS_ENTRY_HINT = (
    "a domain ('api.example.com'), a subdomain wildcard ('*.example.com'), an IPv4/IPv6 address or CIDR "
    "('10.0.0.0/8', '2001:db8::/32'), each optionally with ':port' (IPv6 in brackets: '[2001:db8::1]:443')"
)
EgressEntry = Annotated[
    str,
    StringConstraints(min_length=1, max_length=260),
    WithJsonSchema(
        {"type": "string", "minLength": 1, "maxLength": 260, "title": "egress entry", "x-hint": EGRESS_ENTRY_HINT}
    ),
]


# The gateway holds the allow-list (squid.conf) and the logging resolver the names it answers; nothing else
# changes with it.
GATEWAY = Effect(host=frozenset({"gateway", "logger"}))
# What a pool's route out and its logging reach: the pool's network (and the gateway's egress network), the guard's
# rules naming its bridge, the gateway's place and squid.conf entry, the logging resolver on its bridge address.
NETWORK_ROLES = frozenset({"networks", "guard", "gateway", "logger"})
# A route change of a template whose setup steps went through the gateway, or now do: the build's proxy arguments
# change, so its snapshot is rebuilt too (docs/design/setup-policy.md).
ROUTE_AND_SETUP = Effect(sandboxes="replace", snapshot="rebuild", host=NETWORK_ROLES)
# A block: the union of its fields' effects; with the route kept, only what `allow`, `deny` and `allow_metadata` renew.
NETWORK_BLOCK = Effect(sandboxes="replace", host=NETWORK_ROLES,
                       when=((ROUTE_KEPT, Effect(host=frozenset({"gateway", "guard", "logger"}))),
                             (SETUP_GATEWAY, ROUTE_AND_SETUP)))


# Bounds on a direct route's connections (the only route they apply to, rule egress-mode): the guard's rules
# (sandstack/plan/network.py), renewed with them.
CONNECTION_BOUNDS = Effect(host=frozenset({"guard"}))


class ConnectionBounds(StrictModel):
    """How many connections a sandbox with a direct route (unlogged 'allow-all' or `protocols: any`) may open and
    hold, alone and with the rest of its pool. Past a bound the host guard refuses the new connection (an ICMP
    port-unreachable): the connection logger keeps up with every connection it lets through, and one sandbox
    cannot fill the host's connection-tracking table (docs/design/egress-log.md). Raising a bound loosens it."""

    rate: int = field(
        100, description="New connections per second one sandbox may open (a burst of as many is allowed). At most "
                         "`pool_rate`, which counts the sandbox too (a larger one would never be reached).",
        change=CONNECTION_BOUNDS, access=loosens("egress", "raised", 100, 200), ge=1, le=10000,
    )
    pool_rate: int = field(
        400, description="New connections per second the pool's sandboxes may open together (a burst of as many).",
        change=CONNECTION_BOUNDS, access=loosens("egress", "raised", 400, 800), ge=1, le=100000,
    )
    open: int = field(
        1024, description="Connections one sandbox may hold at a time, as the host's connection tracking counts "
                          "them (a UDP flow counts until it times out). At most `pool_open`.",
        change=CONNECTION_BOUNDS, access=loosens("egress", "raised", 1024, 2048), ge=1, le=65536,
    )
    pool_open: int = field(
        4096, description="Connections the pool's sandboxes may hold at a time together.",
        change=CONNECTION_BOUNDS, access=loosens("egress", "raised", 4096, 8192), ge=1, le=262144,
    )


class NetworkPolicy(StrictModel):
    """Where a sandbox may connect. Inbound is always closed except the declared `ports`.

    No mode can reach the Docker host's own services, other pools' sandboxes, (unless `allow_metadata`)
    link-local and cloud metadata addresses, or private addresses that no `allow` entry names. Unlogged 'allow-all' reaches DNS resolvers (any of them). The
    logged modes reach the host's logging resolver only, on their bridge's address, which logs every query and
    answers for 'allow-all' every name but special-use ones (.test, .invalid, .localhost, .example), for
    'allow-list' only the `allow` names (as the gateway reads them), and in both never a name a `deny` entry
    without a port covers (NXDOMAIN). 'deny-all' reaches no resolver.
    """

    egress: EgressMode = field(
        "deny-all",
        description=(
            "'deny-all' (default): no route anywhere. 'allow-list': only the host's egress gateway (an HTTP "
            "proxy) is reachable and it forwards only to `allow` minus `deny`. 'allow-all': any destination but "
            "private addresses (LAN, VPC, loopback, CGNAT) that `allow` does not name (a direct route still reaches "
            "DNS there); "
            "with `log` on, egress goes through the gateway (plain HTTP to any port, HTTPS tunnels to port 443 "
            "only) and is logged, with `log` off the sandbox gets a direct route out for any protocol. A change "
            "replaces the pool's sandboxes and renews its network, the host guard's rules, the gateway and the "
            "logging resolver; between 'deny-all' and unlogged 'allow-all' (`log: false`) only the network and the "
            "guard's rules."
        ),
        change=Effect(sandboxes="replace", host=NETWORK_ROLES,
                      when=((UNLOGGED_ALLOW_ALL, Effect(host=frozenset({"guard", "networks"}))),
                            (SETUP_GATEWAY, ROUTE_AND_SETUP))),
        access=loosens("egress", "to a wider mode (deny-all < allow-list < allow-all)", "deny-all", "allow-all"),
    )
    allow: list[EgressEntry] = field(
        [],
        description=(
            "Destinations an 'allow-list' sandbox may reach through the gateway. A domain matches exactly that "
            "name; '*.example.com' matches its subdomains, not the apex. Without ':port': HTTP on ports 80 and "
            "443 and HTTPS tunnels (CONNECT) to 443; with a port, that port only. The pool's resolver answers "
            "these names only. Private addresses (" + ", ".join(PRIVATE_RANGES) + ") are refused in every mode, "
            "by address or by a name that resolves there, unless an entry names them: an address or CIDR entry "
            "covering the address, or an exact domain entry (an internal host's name); a wildcard never (whoever "
            "adds a subdomain could point it there). In 'allow-all' the entries are only those exceptions: an "
            "address, CIDR or exact domain reaching a private destination as 'allow-all' reaches others (with "
            "':port', that port only); on a direct route (`log: false` or `protocols: any`) addresses and CIDRs "
            "only, without a port, each a whole address the host guard lets through (docs/design/egress.md). A "
            "change renews the gateway (its squid.conf) and the logging resolver, or only the guard on a direct "
            "route."
        ),
        change=Effect(host=frozenset({"gateway", "logger"}),
                      when=((DIRECT_ROUTE, Effect(host=frozenset({"guard"}))),)),
        access=loosens("egress", "an entry added (outside deny-all)",
                       ["api.github.com"], ["api.github.com", "pypi.org"]), max_length=512,
    )
    deny: list[EgressEntry] = field(
        [],
        description=(
            "Destinations refused even when `allow` matches them (deny wins). A domain also refuses all its "
            "subdomains ('blocked.test' refuses 'x.blocked.test'); '*.example.com' refuses its subdomains "
            "only. 'allow-list' and logged 'allow-all': the gateway refuses them, whatever their form. Unlogged 'allow-all' (`log: false`): "
            "the host guard's firewall refuses them, and as it sees addresses, not names, only IP addresses "
            "and CIDRs are accepted there (optionally with ':port'), never domains or wildcards. Not "
            "applicable to 'deny-all'. A domain or wildcard without a port is not resolved either (NXDOMAIN). A "
            "change renews the gateway and the logging resolver, or only the guard on a direct route (unlogged "
            "'allow-all' or `protocols: any`)."
        ),
        change=Effect(host=frozenset({"gateway", "logger"}),
                      when=((DIRECT_ROUTE, Effect(host=frozenset({"guard"}))),)),
        access=loosens("egress", "an entry removed (outside deny-all)", ["gist.github.com"], []),
        max_length=512,
    )
    log: bool | None = field(
        None,
        description=(
            "Record one egress-log line per request (sandbox, destination, verdict) in the gateway's access "
            "log. Default: on for 'allow-list' and 'allow-all'. 'allow-list' is always logged (`log: false` is "
            "refused); `log: false` on 'allow-all' gives a direct, unlogged route out; not applicable to 'deny-all'. "
            "A change renews the pool's network (its sandboxes move with it), the host guard's rules, the gateway "
            "and the logging resolver (which only logged pools reach); one that keeps the meaning (`true` on "
            "'allow-all', `false` on 'deny-all') changes nothing."
        ),
        # Logged allow-all goes through the gateway on an internal bridge, unlogged has a routed one.
        change=Effect(sandboxes="replace", host=NETWORK_ROLES,
                      when=((ROUTE_KEPT, NONE), (SETUP_GATEWAY, ROUTE_AND_SETUP))),
        access=loosens("egress", "turned off (outside deny-all): egress no longer logged", True, False),
    )
    protocols: Literal["http", "any"] | None = field(
        None,
        description=(
            "Logged 'allow-all' only. 'http' (default): egress goes through the gateway, which logs every request "
            "(plain HTTP to any port, HTTPS tunnels to 443). 'any': a direct route out for any protocol (databases, "
            "SSH, UDP…) and every new connection logged by the host's connection logger (time, pool, sandbox "
            "address, destination address and port, protocol), and names resolved by the host's logging "
            "resolver; as with `log: false`, `deny` then takes addresses and CIDRs only (docs/design/egress-log.md). "
            "A change between 'http' and 'any' replaces the pool's sandboxes and renews its network, the guard's "
            "rules, the gateway and the logger (the pool's resolver answers alike; the gateway's resolver answers "
            "the gateway pools); unset and 'http' mean the same."
        ),
        change=Effect(sandboxes="replace", host=frozenset({"networks", "guard", "gateway", "logger"}),
                      when=((ROUTE_KEPT, NONE), (SETUP_GATEWAY, ROUTE_AND_SETUP))),
        access=loosens("egress", "'any': a direct route out for any protocol instead of the gateway", "http", "any"),
    )
    allow_metadata: bool = field(
        False,
        description=(
            f"Let the sandbox reach link-local addresses ({METADATA_RANGES[0]} and {METADATA_RANGES[1]}), which "
            f"include cloud metadata services (169.254.169.254) and their instance credentials, and AWS's IPv6 "
            f"metadata address {METADATA_RANGES[2].removesuffix('/128')} (not link-local, refused with them). "
            "Default false: every egress mode refuses them, at the gateway and in the host guard's rules, "
            "whatever `allow` says. true is a reviewable loosening; not applicable to 'deny-all'. A change renews "
            "the gateway and the guard's rules, or only the guard on a direct route (unlogged 'allow-all' or "
            "`protocols: any`)."
        ),
        change=Effect(host=frozenset({"gateway", "guard"}),
                      when=((DIRECT_ROUTE, Effect(host=frozenset({"guard"}))),)),
        access=loosens("egress", "turned on: metadata and link-local addresses reachable", False, True),
    )
    connections: ConnectionBounds = field(
        ConnectionBounds(),
        description=(
            "Bounds on the new and open connections of a direct route (unlogged 'allow-all' or `protocols: any`), "
            "per sandbox and per pool, enforced by the host guard; past them a connection is refused. Not "
            "applicable to the other modes (the gateway bounds their connections). A change renews the guard's "
            "rules."
        ),
        change=CONNECTION_BOUNDS, access=AS_FIELDS,
    )


# A template's profiles share one route, through the gateway (rule network-profiles): a change of them reaches the
# gateway's ACLs, the logging resolver's names and, when the names change, the runtime's list of them (its
# configuration). The block also replaces the sandboxes when the template's route changes with it (a template taking
# profiles instead of a `network` of another route).
PROFILE_EDIT = Effect(host=frozenset({"gateway", "logger", "runtime"}), when=(
    (PROFILE_NAMES_KEPT, Effect(host=frozenset({"gateway", "logger"}))),))
PROFILES = Effect(sandboxes="replace", host=NETWORK_ROLES | {"runtime"}, when=(
    (PROFILE_NAMES_KEPT, PROFILE_EDIT.under(PROFILE_NAMES_KEPT)),
    (ROUTE_KEPT, Effect(host=PROFILE_EDIT.host)),
))
MAX_PROFILES = 16


class NetworkProfiles(StrictModel):
    """Named egress policies a session's sandbox switches between at run time (`POST /v1/sessions/{id}/network`,
    the client's `network(profile)`), without a restart: the gateway holds every profile's rules and applies the one
    the runtime recorded for the sandbox to each request. A released or reset sandbox is back in `start`. Every
    profile goes through the gateway ('deny-all', 'allow-list', or logged 'allow-all' with `protocols: http`), so a
    switch never moves a sandbox to another network; review and `check` judge each profile and the loosest of them
    (docs/design/network-profiles.md)."""

    start: Name = field(
        description="The profile a session starts in (a claimed, released or reset sandbox is in it). One of "
                    "`profiles`. A change renews the gateway's rules and the runtime's configuration (both in place).",
        change=Effect(host=frozenset({"gateway", "runtime"})),
        # What a sandbox may reach is any profile's, whichever it starts in: the loosest is judged.
        access=NEVER,
    )
    profiles: dict[Name, NetworkPolicy] = field(
        description="The profiles by name, each a whole network policy (`egress`, `allow`, `deny`, `log`, "
                    "`allow_metadata`) as `network` takes it; at least 2, at most 16. 'deny-all' among them "
                    "means the gateway refuses everything (logged). `allow_metadata` is the same in every profile "
                    "(the host guard's rules follow it); not all 'deny-all'. A change reloads the gateway and the "
                    "logging resolver (which answers the names of every profile of the pool, whichever profile a "
                    "session is in: the gateway enforces the session's); one that adds, removes or renames a "
                    "profile also the runtime's configuration. No sandbox is replaced: every profile goes through "
                    "the gateway, so the route never changes.",
        change=PROFILE_EDIT,
        access=loosens("egress", "a profile added or loosened (each profile, and the loosest, is judged)",
                       {"locked": {"egress": "deny-all"}, "open": {"egress": "allow-list", "allow": ["pypi.org"]}},
                       {"locked": {"egress": "deny-all"},
                        "open": {"egress": "allow-list", "allow": ["pypi.org", "files.pythonhosted.org"]}}),
        whole=True, min_length=2, max_length=MAX_PROFILES,
    )


URL_REPLACE = Effect(sandboxes="replace", when=(
    (URL_PORTS_CHANGE, Effect(sandboxes="replace", host=frozenset({"ingress", "guard"}))),))
# What a port list or an exposure change renews beyond the sandboxes: the ingress and the guard for the url ports,
# the network and the guard when the network turns internal or routed.
PORTS = Effect(sandboxes="replace", when=(
    (URL_AND_ROUTING, Effect(sandboxes="replace", host=frozenset({"ingress", "guard", "networks"}))),
    (URL_PORTS_CHANGE, Effect(sandboxes="replace", host=frozenset({"ingress", "guard"}))),
    (ROUTING, Effect(sandboxes="replace", host=frozenset({"guard", "networks"}))),
))


class Port(StrictModel):
    """A port a sandbox listens on, and who can reach it."""

    port: int = field(description="Port inside the sandbox.", change=URL_REPLACE,
                      access=loosens("ports", "an exposed port moved: the new one is newly reachable", 8000, 8001),
                      ge=1, le=65535)
    protocol: Literal["tcp", "udp"] = field(
        "tcp", description="'tcp' (default) or 'udp'.", change="replace",
        access=loosens("ports", "an exposed port moved: the new one is newly reachable", "tcp", "udp"))
    exposure: Literal["none", "host", "public", "url"] = field(
        "none",
        description=(
            "'none' (default): not published. 'host': published on the host's loopback (127.0.0.1) only. "
            "'public': published on all the host's interfaces. 'url': not published; reached as "
            "`https://<port>-<pool>-<replica>.<domain>` through the host's `ingress` over the pool's network, and "
            "given to the sandbox as SANDSTACK_URL_<NAME> (the port's name, else its number). A change replaces the "
            "pool's sandboxes; to or from 'url' it renews the ingress and the guard's rules, and one that publishes "
            "the pool's first port or unpublishes its last renews its network and the guard's rules."
        ),
        change=PORTS,
        access=loosens("ports", "wider (none < host < url, public)", "none", "public"),
    )
    host_port: int | None = field(
        None,
        description=(
            "Fixed port on the host. Default: Docker picks a free one (see the stack outputs). A fixed port "
            "can be owned by one sandbox per host, so its pool can have only one replica per host."
        ),
        change="replace",
        access=NEVER, ge=1, le=65535,
    )
    name: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]{0,14}$")] | None = field(
        None, description="Optional name for the port in stack outputs, e.g. 'http'; a url port's env var is "
        "named after it.", change=Effect(when=((URL_PORT, Effect(sandboxes="replace")),)),
        access=NEVER
    )


# The ingress's Caddyfile holds the check (its site's `forward_auth` to the runtime); nothing else changes.
URL_AUTH = Effect(host=frozenset({"ingress"}))


class Urls(StrictModel):
    """Who may open the URLs of the template's `exposure: url` ports."""

    auth: Literal["none", "session"] = field(
        "none",
        description=(
            "'none' (default): anyone who knows a URL's host name reaches the sandbox's port. 'session': only a "
            "holder of the token of the session bound to the sandbox (the claim's answer): the ingress asks the "
            f"host's runtime before each request. A program sends it in the `{URL_AUTH_HEADER}` header; a browser "
            f"opens the URL once with `?{URL_AUTH_QUERY}=<token>`, is sent on to the same URL without it and keeps "
            f"it in an HttpOnly cookie `{URL_AUTH_COOKIE}` of that site, which the sandbox's app never receives. "
            "Anything else — no token, another session's, a released or expired one, a site with no session — gets "
            "the same 401. Needs a runtime on every host of the template's pools (rule `url-auth`). A change "
            "reloads the ingress's configuration."),
        change=URL_AUTH,
        access=loosens("ports", "to 'none': a session's URLs open to anyone who knows their host name",
                       "session", "none"),
    )
