"""The egress gateway's squid.conf, rendered from the pools' effective network policies.

One gateway serves every gateway pool on a host; each pool has its own listening port, and the host
guard lets a pool's bridge reach only that port, so squid knows the pool from the port (`myportname`)
without trusting any address. Rule order: the cache manager, a sandbox over its connection cap, gateway
ports and loopback literals are refused for every pool; then, per pool, requests from outside its
network, CONNECT to a port it may not tunnel to, its deny entries, its allows, and finally deny all.

- Exact domains use `dstdomain -n`; `*.example.com` matches subdomains only (the apex is excluded).
  A plain-domain *deny* also covers its subdomains (`blocked.test` refuses `x.blocked.test`): a deny
  that a subdomain slips past protects nothing. Allow entries keep their exact meaning.
- CIDR allows apply to IP-literal requests only: a `dst` check on a name makes squid resolve it, and a
  denied name must not cause a DNS query (docs/design/engine-findings.md d). For the same reason every
  `dst` refusal that must also hold for names (loopback, the gateway's own addresses, the pool's
  `blocked` networks, CIDR denies) is a `!acl` condition on each allow line: squid resolves only a
  name that an allow already matched.
- An allow entry without a port allows ports 80 and 443; with a port, that port only. In every mode,
  allow-all included, CONNECT (a TCP tunnel for any protocol) reaches only 443 and the ports that the
  pool's allow entries name.
- Requests to any gateway port, to the gateway's own addresses and to loopback (by address or by name)
  are refused: the gateway must never become a path into a sandbox or into itself.
- Private destinations (PRIVATE_RANGES: the LAN, the VPC, another host's Docker API), by address or by a name
  that resolves to one, are refused unless an allow entry names them: the allow-all line and every wildcard line
  carry `!sandstack_private`; an exact domain's line and an address/CIDR line do not (docs/design/egress.md). In
  'allow-all' the allow entries are those exceptions, each reaching what allow-all reaches (any port for plain
  HTTP) unless it names a port.
- Squid listens on loopback only, one port per pool (sandstack.plan.front.squid_port), behind HAProxy, which holds
  the pools' ports and names each connection's source in a PROXY protocol header: squid trusts that header from
  loopback only (`proxy_protocol_access`) and takes the sandbox's address from it for every `src`, `%SRC`, `maxconn`
  and log field.
- Nothing the gateway sends names the sandbox or the gateway: no X-Forwarded-For, no Via, no squid
  version, and error pages from ERROR_DIRECTORY, which the gateway's entrypoint writes.
- A pool whose template declares network profiles has every profile's deny and allow lines, each also conditioned
  on an `external` acl that holds when the request's source address is in that profile now: the profile helper
  (PROFILE_HELPER, written by the gateway's entrypoint) reads the file the runtime wrote for the address at every
  request (`ttl=0 negative_ttl=0`: never cached), the start profile when there is none. So a switch takes effect
  at the next request without a reconfigure (which closes squid's listening ports for an instant).
"""

from __future__ import annotations

from dataclasses import dataclass

from sandstack.plan.contract import CONFIG_DIR, CONFIG_PROFILES, PROFILE_HELPER
from sandstack.plan.front import SQUID_ADDRESS, squid_port
from sandstack.plan.network import GATEWAY_CONNECTIONS_PER_SANDBOX
from sandstack.spec.egress import PRIVATE_RANGES, EgressRule
from sandstack.spec.resolve import EffectiveNetwork

ACCESS_LOG = "/var/log/squid/access.log"
# Written by the gateway's entrypoint at start: its addresses are Docker's choice, known only then.
SELF_ADDRESSES = "/tmp/sandstack-self"
ERROR_DIRECTORY = "/tmp/sandstack-errors"
DEFAULT_PORTS = (80, 443)
CONNECT_PORT = 443
# Loopback and "this host" (a connect to 0.0.0.0 or :: reaches the gateway's own listeners).
LOOPBACK = ("127.0.0.0/8", "0.0.0.0/32", "::1", "::/128")
# The gateway's descriptors (two per proxied connection). Squid takes the lower of this and the container's
# nofile limit, which is the Docker daemon's own (a container cannot raise it: measured 20000 on this
# project's machines, 1048576 under systemd); the README asks hosts for at least this much. The guard
# bounds each pool to network.GATEWAY_CONNECTIONS_PER_POOL connections, so one pool cannot take all.
MAX_FILEDESCRIPTORS = 16384
VISIBLE_HOSTNAME = "sandstack-gateway"
# The network profiles' helper (written by the gateway's entrypoint, sandstack.plan.gateway) and the files it reads.
PROFILES_DIR = f"{CONFIG_DIR}/{CONFIG_PROFILES}"
PROFILE_ACL_TYPE = "sandstack_profile"
# Asked at every request (never cached), with the request's source address, then the acl's pool, profile and the
# pool's start profile. A few helpers: each answer is one file read.
PROFILE_ACL = (f"external_acl_type {PROFILE_ACL_TYPE} ttl=0 negative_ttl=0 children-startup=1 children-max=8 %SRC "
               f"/bin/sh {PROFILE_HELPER}")
# The sandbox's name for the log: squid's own reverse lookup (`%>A`) names the connection's peer, which is HAProxy
# on loopback, not the address of the PROXY header; so a helper (written by the gateway's entrypoint) names the
# request's source address (`%SRC`, the header's) by Docker's resolver, the container's name or the address itself
# when it has none, as the acl's tag; a container that is none of sandstack's (a build's RUN container on the pool's
# network) as `setup:<the pool's template>:<its name>`, the acl's argument being the pool's template. Cached 5 s per
# address (an address not yet known to Docker's resolver is asked again soon). The helper never says ERR: the acl
# fails only when the helper does, and then the request is refused — egress the log cannot name is not let
# through.
NAME_HELPER = "/tmp/sandstack-name"
NAME_ACL = (f"external_acl_type sandstack_name ttl=5 negative_ttl=5 children-startup=1 children-max=4 %SRC "
            f"/bin/sh {NAME_HELPER}")
# What the gateway refused a setup step (components/assets/setup_step.sh asks when its step fails): a request for
# this name, which no DNS answers (`.invalid`), through a pool's port is answered by squid itself, a 403 whose page
# (REFUSALS_PAGE, written by the gateway's entrypoint) is `<REFUSALS_PREFIX> <host:port> ...`: the destinations it
# refused the requester's address since the time the URL's path names, or `-`. The helper (written by the
# entrypoint) reads its access log, and answers only a requester that is no container of sandstack's: a sandbox
# never reads what was refused at its address, before its session or since.
REFUSALS_HOST = "refusals.sandstack.invalid"
REFUSALS_PREFIX = "sandstack-refused:"
REFUSALS_PAGE = "ERR_SANDSTACK_REFUSALS"
REFUSALS_HELPER = "/tmp/sandstack-refusals"
# Never cached: each answer is a fresh read. Two helpers: a step asks once, when it has failed.
REFUSALS_ACL = (f"external_acl_type sandstack_refusals ttl=0 negative_ttl=0 children-startup=1 children-max=2 "
                f"%SRC %PATH /bin/sh {REFUSALS_HELPER}")
# One line per request: the sandbox (its container's name; its address when the name is not known), its address,
# the pool, the destination, squid's verdict (TCP_DENIED = refused) and the status sent back.
LOG_FORMAT = (
    "logformat sandstack %{{%Y-%m-%dT%H:%M:%S}}tg.%03tuZ host={host} pool=%{{sandstack_pool}}note "
    "sandbox=%et client=%>a method=%rm dest=%>rd:%>rP verdict=%Ss status=%>Hs bytes=%<st"
)
# What a destination or a sandbox would otherwise learn about the sandbox and the gateway: the sandbox's
# internal address (X-Forwarded-For), the container id and squid version (Via, Server, error pages).
ANONYMITY = (
    f"visible_hostname {VISIBLE_HOSTNAME}",
    "httpd_suppress_version_string on",
    "via off",
    "forwarded_for delete",
    "reply_header_access X-Squid-Error deny all",
    "reply_header_access X-Cache deny all",
    "reply_header_access X-Cache-Lookup deny all",
    f"error_directory {ERROR_DIRECTORY}",
)


@dataclass(frozen=True)
class GatewayPool:
    pool: str
    port: int
    network: EffectiveNetwork
    subnet: str  # the pool's network: requests on its port from elsewhere are refused
    address: str  # the gateway's own address on that network
    # Networks this pool must never reach through the gateway, whatever its policy says (link-local
    # unless the template opts in, the host's sandbox subnets); the caller decides which.
    blocked: tuple[str, ...] = ()
    network_name: str = ""  # the pool network's Docker name, which the gateway's reload container joins it to
    # The template's network profiles (name, policy) and the one its sessions start in; `network` is then their
    # envelope (sandstack.spec.resolve.envelope), which only the pool's header reads.
    profiles: tuple[tuple[str, EffectiveNetwork], ...] = ()
    start: str | None = None
    template: str = ""  # the pool's template: a setup build's requests are logged as its (NAME_ACL)


def _acl_name(prefix: str, kind: str, index: int) -> str:
    """`prefix`: the pool's name with '_' for '-' (and `-<profile>` for a profile's entries)."""
    return f"{prefix}_{kind}{index}"


def _entry_acls(prefix: str, kind: str, index: int, rule: EgressRule, any_port: bool = False) -> tuple[list[str], str]:
    """The acl lines for one entry and the http_access condition that matches it. A deny without a
    port denies every port; an allow without a port allows only the web ports, or (`any_port`: an allow-all
    pool's exception for a private destination) every port allow-all reaches."""
    name = _acl_name(prefix, kind, index)
    lines: list[str] = []
    if rule.kind == "domain":
        # `.name` matches the name and every subdomain: what a deny means, more than an allow says.
        lines.append(f"acl {name} dstdomain -n {'.' if kind == 'deny' else ''}{rule.value}")
        cond = name
    elif rule.kind == "wildcard":
        lines.append(f"acl {name} dstdomain -n .{rule.value}")
        lines.append(f"acl {name}_apex dstdomain -n {rule.value}")
        cond = f"{name} !{name}_apex"
    else:
        lines.append(f"acl {name} dst {rule.value}")
        cond = f"sandstack_ip_literal {name}"
    ports = [rule.port] if rule.port else (list(DEFAULT_PORTS) if kind == "allow" and not any_port else [])
    if not ports:
        return lines, cond
    lines.append(f"acl {name}_port port {' '.join(str(p) for p in ports)}")
    return lines, f"{cond} {name}_port"


def _global(stack: str, host: str, pools: list[GatewayPool]) -> list[str]:
    profiles = [PROFILE_ACL] if any(p.profiles for p in pools) else []
    return [
        f"# Generated by sandstack for stack '{stack}' on host '{host}'; one listening port per pool.",
        *(f"http_port {SQUID_ADDRESS}:{squid_port(p.port)} name={p.pool} require-proxy-header" for p in pools),
        "pid_filename /tmp/squid.pid",
        # Stop within Docker's grace period instead of waiting 30 s for open connections.
        "shutdown_lifetime 2 seconds",
        f"max_filedescriptors {MAX_FILEDESCRIPTORS}",
        "cache deny all",
        "cache_mem 0 MB",
        "pinger_enable off",
        "logfile_rotate 0",
        "cache_log stdio:/var/log/squid/cache.log",
        LOG_FORMAT.format(host=host),
        f"access_log stdio:{ACCESS_LOG} logformat=sandstack",
        *ANONYMITY,
        r"acl sandstack_ip_literal dstdom_regex -n ^[0-9.]+$ ^\[?[0-9a-fA-F:]+\]?$",
        "acl sandstack_gateway_ports port " + " ".join(str(port) for p in pools for port in (p.port, squid_port(p.port))),
        # HAProxy in front (sandstack.plan.front) names each connection's source; nothing else reaches loopback.
        f"acl sandstack_front src {SQUID_ADDRESS}",
        "proxy_protocol_access allow sandstack_front",
        "proxy_protocol_access deny all",
        "acl sandstack_localhost dst " + " ".join(LOOPBACK),
        "acl sandstack_private dst " + " ".join(PRIVATE_RANGES),
        f'acl sandstack_self dst "{SELF_ADDRESSES}"',
        "acl sandstack_connect method CONNECT",
        NAME_ACL,
        # Each pool's port, and its name acl with the pool's template (for a build's requests, NAME_ACL).
        *(line for p in pools for line in (f"acl {_prefix(p)}_from myportname {p.pool}",
                                           f"acl {_prefix(p)}_named external sandstack_name {p.template or p.pool}")),
        *profiles,
        # A sandbox's share of the gateway's descriptors: the guard's bound, which resets a sandbox's
        # connection past it; squid's own cap holds should the guard's rules be missing.
        f"acl sandstack_maxconn maxconn {GATEWAY_CONNECTIONS_PER_SANDBOX}",
        # The cache manager (cache_object:// and /squid-internal-mgr/ URLs) shows every pool's requests
        # and clients: first, before anything could allow it.
        "http_access deny manager",
        "http_access deny sandstack_maxconn",
        # Before any other rule, so every request but those two refusals is named in the log (those show `-`). Every
        # port is a pool's: each request is named by exactly one of these.
        *(f"http_access deny {_prefix(p)}_from !{_prefix(p)}_named" for p in pools),
        # A setup step asking what was refused it: answered here, before any pool's rules (REFUSALS_HOST).
        REFUSALS_ACL,
        f"acl sandstack_refusals_asked dstdomain -n {REFUSALS_HOST}",
        "acl sandstack_refusals external sandstack_refusals",
        f"deny_info {REFUSALS_PAGE} sandstack_refusals",
        "http_access deny sandstack_refusals_asked sandstack_refusals",
        "http_access deny sandstack_gateway_ports",
        "http_access deny sandstack_ip_literal sandstack_localhost",
    ]


def _prefix(p: GatewayPool) -> str:
    return p.pool.replace("-", "_")


def _pool(p: GatewayPool) -> list[str]:
    prefix = _prefix(p)
    port_acl, src_acl, connect_acl = f"{prefix}_from", f"{prefix}_src", f"{prefix}_connect_port"
    policies = [n for _, n in p.profiles] or [p.network]
    connect_ports = sorted({CONNECT_PORT} | {r.port for n in policies for r in n.allow if r.port})
    head = f"# pool '{p.pool}': egress {p.network.egress}"
    if p.profiles:
        head += f", network profiles {', '.join(name for name, _ in p.profiles)} (start {p.start})"
    out = ["", head,  # its port acl, `port_acl`, is defined with its name acl (`_global`)
           f"acl {src_acl} src {p.subnet}", f"note sandstack_pool {p.pool} {port_acl}",
           # The guard already confines the port to the pool's bridge; this says so twice.
           f"http_access deny {port_acl} !{src_acl}",
           # A tunnel carries any protocol: to an SSH or database port it is a raw connection out.
           f"acl {connect_acl} port {' '.join(map(str, connect_ports))}",
           f"http_access deny {port_acl} sandstack_connect !{connect_acl}"]
    blocked = f"{prefix}_blocked" if p.blocked else None
    define = [f"acl {blocked} dst {' '.join(p.blocked)}"] if p.blocked else []
    if not p.profiles:
        return out + _rules(prefix, port_acl, p.network, blocked, define)
    out += define  # once, before the profiles that name it
    for name, network in p.profiles:
        # '-' never occurs in a pool's part of an acl name ('-' becomes '_'), so `<pool>-<profile>` is its own.
        acl = f"{prefix}-{name.replace('-', '_')}"
        out += ["", f"# pool '{p.pool}', network profile '{name}': egress {network.egress}",
                f"acl {acl} external {PROFILE_ACL_TYPE} {p.pool} {name} {p.start}"]
        out += _rules(acl, f"{port_acl} {acl}", network, blocked, [])
    return out


def _rules(prefix: str, when: str, network: EffectiveNetwork, blocked: str | None, define: list[str]) -> list[str]:
    """One policy's deny and allow lines, each under `when` (the pool's port, and its profile's acl). `blocked`: the
    pool's acl of refused networks; `define`: its definition, put after the denies (where it was not put before)."""
    out: list[str] = []
    # `dst` refusals written as `!acl` on every allow: squid then resolves only names that an allow
    # already matched (a `deny dst` line first would resolve every request).
    refused: list[str] = []
    for i, rule in enumerate(network.deny):
        name = _acl_name(prefix, "deny", i)
        if rule.kind == "cidr":
            # It holds for names too (their addresses); with a port it is one condition, port first, so
            # a name on another port is not resolved for it.
            out.append(f"acl {name} dst {rule.value}")
            if rule.port is not None:
                out += [f"acl {name}_port port {rule.port}", f"acl {name}_on_port all-of {name}_port {name}"]
                name = f"{name}_on_port"
            refused.append(name)
            continue
        lines, cond = _entry_acls(prefix, "deny", i, rule)
        out += lines + [f"http_access deny {when} {cond}"]
    refused += ["sandstack_localhost", "sandstack_self"]
    out += define
    if blocked:
        refused.append(blocked)
    unless = "".join(f" !{name}" for name in refused)
    allow_all = network.egress == "allow-all"
    if allow_all:
        out.append(f"http_access allow {when}{unless} !sandstack_private")
    for i, rule in enumerate(network.allow):
        lines, cond = _entry_acls(prefix, "allow", i, rule, any_port=allow_all)
        # A wildcard names no host: whoever adds a subdomain could point it at a private address.
        private = " !sandstack_private" if rule.kind == "wildcard" else ""
        out += lines + [f"http_access allow {when} {cond}{unless}{private}"]
    return out


def render(stack: str, host: str, pools: list[GatewayPool]) -> str:
    pools = sorted(pools, key=lambda p: p.pool)
    out = _global(stack, host, pools)
    for p in pools:
        out += _pool(p)
    out += ["", "http_access deny all", ""]
    return "\n".join(out)
