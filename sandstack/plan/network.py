"""How each pool's network policy becomes Docker networks and host firewall rules.

This is the one table from egress mode to mechanism. Every sandbox pool gets its own bridge, with
inter-container traffic off (`enable_icc=false`), so sandboxes of one pool cannot reach each other
and sandboxes of different pools are on different bridges. The host guard (see `host_guard.py`)
enforces the rest with the rules rendered here:

| egress                  | bridge                  | outbound                                                |
|-------------------------|-------------------------|---------------------------------------------------------|
| deny-all                | internal                | none                                                    |
| allow-list              | internal                | only the gateway's address and port for this pool       |
| allow-all, log on       | internal                | only the gateway's address and port for this pool       |
| allow-all, log off      | routed                  | direct (NAT), no new connections to host; not to        |
|                         |                         | link-local/metadata addresses nor the `deny` CIDRs, nor |
|                         |                         | private ones but DNS and the `allow` addresses          |

Every logged pool (allow-list, logged allow-all) also reaches its own logging resolver on its bridge's address,
port 53 (sandstack/plan/resolver.py says what it answers); deny-all reaches none, unlogged allow-all any.

Each pool's network is a /23 of the host's `subnet_pool`: sandboxes get addresses from its first /24,
the gateway the last address, fixed, so the guard's rules can name it.

A pool that publishes ports needs a routed bridge (Docker publishes nothing on an internal one); the
guard then drops every new connection leaving that bridge, so publishing a port never adds egress.
On every sandstack bridge the guard drops new connections to the host itself (its services, DNS,
docker-proxy), which Docker never filters. On a gateway pool's bridge it also bounds the connections
to the gateway, per pool and per sandbox, so one sandbox cannot run the shared gateway out of file
descriptors for every other pool. On a direct route it bounds new connections (a rate) and open ones
(conntrack entries), per sandbox and per pool (`network.connections`), and a logged one (`protocols: any`)
holds each new connection in the connection logger's queue until its line is written (docs/design/egress-log.md).
"""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass
from typing import Collection, Mapping

from sandstack.plan.naming import bridge_name, docker_name
from sandstack.plan.resolver import name_options
from sandstack.spec.addresses import GATEWAY_PORT_BASE, GATEWAY_PORT_SPAN
from sandstack.spec.egress import METADATA_RANGES, PRIVATE_RANGES
from sandstack.spec.models.hosts import POOL_SUBNET_PREFIX
from sandstack.spec.models.network import ConnectionBounds
from sandstack.spec.resolve import Outbound, ResolvedTemplate

GATEWAY_ALIAS = "sandstack-gateway"
# What a sandbox (and a setup step) reaches without the proxy: its own loopback.
NO_PROXY = "localhost,127.0.0.1,::1"

# Connections to the gateway: per pool (all of the bridge's sandboxes together) and per sandbox. Squid's
# file descriptors (squid.MAX_FILEDESCRIPTORS, two per proxied connection) hold every pool's share.
GATEWAY_CONNECTIONS_PER_POOL = 1024
GATEWAY_CONNECTIONS_PER_SANDBOX = 256

# The packet mark the connection logger sets on a connection's first packet once it has written its line, when it
# hands it back (NF_REPEAT): the packet then runs through the chain again, past the queue and the rate bounds.
LOGGED_MARK = "0x20000000/0x20000000"

ESTABLISHED = "-m conntrack --ctstate ESTABLISHED,RELATED"
NOT_ESTABLISHED = "-m conntrack ! --ctstate ESTABLISHED,RELATED"


@dataclass(frozen=True)
class PoolNetwork:
    pool: str
    name: str  # Docker network name
    bridge: str  # Linux bridge name, what the host guard's rules match
    internal: bool
    outbound: Outbound
    gateway_port: int | None
    subnet: ipaddress.IPv4Network
    # Destinations a direct (routed) sandbox must not reach: iptables match fragments, e.g. "-d 10.0.0.0/8".
    refused: tuple[str, ...] = ()
    url_ports: tuple[int, ...] = ()  # tcp ports the host's ingress proxies to (`exposure: url`)
    log_queue: int | None = None  # direct and logged (`protocols: any`): the connection logger's NFQUEUE queue
    # A logged pool's resolver: what the host's logging resolver answers it (sandstack/plan/resolver.py).
    resolver_options: tuple[str, ...] = ()
    connections: ConnectionBounds | None = None  # direct: its bounds on new and open connections

    @property
    def bridge_ip(self) -> str:
        return str(self.subnet[1])

    @property
    def sandbox_range(self) -> str:
        """Where Docker picks sandbox addresses: the first half, so they can never take the gateway's."""
        return str(next(self.subnet.subnets(prefixlen_diff=1)))

    @property
    def gateway_ip(self) -> str:
        return str(self.subnet[-2])

    @property
    def resolver(self) -> str | None:
        """Where a logged pool's sandboxes resolve names: the host's logging resolver on the bridge's address."""
        return self.bridge_ip if self.resolver_options else None

    @property
    def ingress_ip(self) -> str:
        """The ingress proxy's fixed address on this network (next to the gateway's), named by the guard's rules."""
        return str(self.subnet[-3])

    @property
    def proxy_url(self) -> str | None:
        return f"http://{GATEWAY_ALIAS}:{self.gateway_port}" if self.gateway_port else None


def outbound_of(template: ResolvedTemplate) -> Outbound:
    return template.network.outbound  # decoded once, in sandstack.spec.resolve.decode_egress


def has_resolver(template: ResolvedTemplate) -> bool:
    """Whether its pools resolve names through the host's logging resolver (every logged pool but deny-all)."""
    return bool(template.network.log) and outbound_of(template) != "none"


def publishes_ports(template: ResolvedTemplate) -> bool:
    return any(p.exposure in ("host", "public") for p in template.ports)


def url_ports(template: ResolvedTemplate) -> tuple[int, ...]:
    return tuple(sorted({p.port for p in template.ports if p.exposure == "url"}))


def _stable_slots(stack: str, pools: list[str], slots: int, kept: Mapping[str, int] | None = None,
                  held: Collection[int] = (), freed: Collection[int] = ()) -> dict[str, int]:
    """A slot per pool. A pool in `kept` (its slot from the address lock) keeps it; the others, in name order, take
    the slot hashed from the stack and their name, probing past the slots taken (kept, `held` by others, given
    already) and those just `freed` (a slot freed and taken in one `pulumi up` would be created before its old
    network is deleted), or past the taken only once nothing else is free."""
    if len(pools) > slots:
        raise ValueError(f"{len(pools)} pools do not fit in {slots} slots")  # rule subnet-pool reports it first
    taken = {pool: (kept or {})[pool] for pool in pools if pool in (kept or {})}
    used = set(taken.values()) | set(held)
    for pool in sorted(p for p in pools if p not in taken):
        start = int(hashlib.sha256(f"{stack}/{pool}".encode()).hexdigest(), 16) % slots
        slot = _probe(start, slots, used | set(freed)) if len(used | set(freed)) < slots else None
        slot = _probe(start, slots, used) if slot is None else slot
        taken[pool] = slot
        used.add(slot)
    return {pool: taken[pool] for pool in sorted(taken)}


def _probe(start: int, slots: int, taken: set[int]) -> int:
    for i in range(slots):
        if (start + i) % slots not in taken:
            return (start + i) % slots
    raise ValueError(f"no free slot of {slots}")  # rule subnet-pool reports it first


def gateway_ports(stack: str, pools: list[str], kept: Mapping[str, int] | None = None,
                  freed: Collection[int] = ()) -> dict[str, int]:
    """A port per gateway pool (`kept`: the lock's ports, `freed`: ports the lock held for pools gone)."""
    slots = _stable_slots(stack, pools, GATEWAY_PORT_SPAN,
                          {p: port - GATEWAY_PORT_BASE for p, port in (kept or {}).items()},
                          freed=[port - GATEWAY_PORT_BASE for port in freed])
    return {pool: GATEWAY_PORT_BASE + slot for pool, slot in slots.items()}


def pool_subnets(stack: str, pools: list[str], subnet_pool: str,
                 kept: Mapping[str, ipaddress.IPv4Network] | None = None,
                 held: Collection[ipaddress.IPv4Network] = (),
                 freed: Collection[ipaddress.IPv4Network] = ()) -> dict[str, ipaddress.IPv4Network]:
    """One /23 per pool from the host's `subnet_pool` (rule subnet-pool checks that they fit); `kept`: the lock's
    subnets of pools still placed, `held`: its egress and ingress subnets, `freed`: its subnets no longer used."""
    candidates = list(ipaddress.IPv4Network(subnet_pool).subnets(new_prefix=POOL_SUBNET_PREFIX))
    index = {net: i for i, net in enumerate(candidates)}
    slots = _stable_slots(stack, pools, len(candidates), {p: index[n] for p, n in (kept or {}).items()},
                          [index[n] for n in held if n in index], [index[n] for n in freed if n in index])
    return {pool: candidates[slot] for pool, slot in slots.items()}


def egress_subnet(stack: str, pools: dict[str, ipaddress.IPv4Network], subnet_pool: str,
                  held: Collection[ipaddress.IPv4Network] = (),
                  freed: Collection[ipaddress.IPv4Network] = ()) -> ipaddress.IPv4Network:
    """The gateway's egress network: a /23 of the host's `subnet_pool`, hashed from the stack and probing past those
    the pools hold, so the gateway's resolver has an address known before Docker makes the network (rule
    subnet-pool counts it). Without a lock, a new pool moves it only by taking exactly its /23; with one, it keeps
    the lock's."""
    return _role_subnet(stack, "egress", set(pools.values()) | set(held), subnet_pool, freed)


def ingress_subnet(stack: str, taken: set[ipaddress.IPv4Network], subnet_pool: str,
                   freed: Collection[ipaddress.IPv4Network] = ()) -> ipaddress.IPv4Network:
    """The ingress's network on a host that also runs a runtime: a /23 of `subnet_pool` as the egress network's, past
    the pools' and the egress network's (`taken`), so the runtime's address on its bridge and the ingress's own are
    known before Docker makes it (the guard's rule and the Caddyfile name both; rule subnet-pool counts it)."""
    return _role_subnet(stack, "ingress", taken, subnet_pool, freed)


def _role_subnet(stack: str, role: str, taken: set[ipaddress.IPv4Network], subnet_pool: str,
                 freed: Collection[ipaddress.IPv4Network] = ()) -> ipaddress.IPv4Network:
    candidates = list(ipaddress.IPv4Network(subnet_pool).subnets(new_prefix=POOL_SUBNET_PREFIX))
    start = int(hashlib.sha256(f"{stack}/{role}".encode()).hexdigest(), 16) % len(candidates)
    for avoid in (taken | set(freed), taken):
        for i in range(len(candidates)):
            if (candidate := candidates[(start + i) % len(candidates)]) not in avoid:
                return candidate
    raise ValueError(f"no room for the {role} network in {subnet_pool}")  # rule subnet-pool reports it first


def ipv4_only(cidrs: tuple[str, ...] | list[str]) -> list[str]:
    # Sandbox networks have no IPv6 address or route, so an IPv6 destination needs no rule.
    return [c for c in cidrs if ipaddress.ip_network(c, strict=False).version == 4]


def refused_metadata(template: ResolvedTemplate) -> tuple[str, ...]:
    """METADATA_RANGES unless the template opted in: refused in every mode, by the gateway and the guard."""
    return () if template.network.allow_metadata else METADATA_RANGES


def refused_private(template: ResolvedTemplate) -> list[str]:
    """PRIVATE_RANGES (IPv4) less the template's `allow` addresses and CIDRs (a direct route's are port-less: rule
    egress-mode), as the networks that cover the rest, in address order: what a direct sandbox may open no connection
    to. Netfilter has no "but", so an exception is the ranges around it (a /32 in a /8: 24 networks)."""
    allowed = [ipaddress.IPv4Network(r.value) for r in template.network.allow if r.kind == "cidr"
               and ipaddress.ip_network(r.value).version == 4]
    left = [ipaddress.IPv4Network(c) for c in ipv4_only(PRIVATE_RANGES)]
    for hole in allowed:
        kept: list[ipaddress.IPv4Network] = []
        for net in left:
            if not net.overlaps(hole):
                kept.append(net)
            elif not net.subnet_of(hole):  # two overlapping networks: one holds the other
                kept += net.address_exclude(hole)
        left = kept
    return [str(n) for n in sorted(left)]


# A new connection, or a packet of none (INVALID), but not to port 53: the sandbox's DNS reaches its resolvers as the
# docs promise (Docker's embedded DNS forwards from the sandbox's own namespace, and a host's resolvers are often
# private, e.g. a VPC's), and an answer to a client of a published port leaves. conntrack's port match covers every
# protocol: one without ports (ICMP, GRE...) never has port 53, so it is refused too.
PRIVATE_MATCH = f"{NOT_ESTABLISHED} ! --ctorigdstport 53"


def refused_destinations(template: ResolvedTemplate) -> tuple[str, ...]:
    """What the guard refuses a direct sandbox: link-local and metadata addresses unless opted in, private addresses
    (PRIVATE_RANGES) but its `allow` entries and DNS, and the template's address/CIDR `deny` entries (with a port:
    that port, TCP and UDP)."""
    out = [f"-d {c}" for c in ipv4_only(refused_metadata(template))]
    out += [f"-d {c} {PRIVATE_MATCH}" for c in refused_private(template)]
    for rule in template.network.deny:
        if rule.kind != "cidr" or not ipv4_only([rule.value]):
            continue  # rules egress-mode and egress-direct-deny refuse names here; IPv6 has no route
        if rule.port is None:
            out.append(f"-d {rule.value}")
        else:
            out += [f"-d {rule.value} -p {proto} --dport {rule.port}" for proto in ("tcp", "udp")]
    return tuple(out)


def gateway_refused(template: ResolvedTemplate, host_networks: list[str]) -> tuple[str, ...]:
    """What the gateway refuses a pool whatever its policy: link-local and metadata addresses unless the
    template opts in, and the host's own networks (`host_networks`: the pools' subnets, so other pools' sandboxes and
    the gateway's own addresses, and the host's address on the egress network, its logging resolver)."""
    return (*refused_metadata(template), *host_networks)


def log_queue(stack: str) -> int:
    """The stack's NFQUEUE queue (1024-65535): two stacks on one host log to their own connection loggers. (Hashed
    as when it numbered an NFLOG group, so the number did not change.)"""
    return 1024 + int(hashlib.sha256(f"{stack}/nflog".encode()).hexdigest(), 16) % (65536 - 1024)


def plan_pool_network(stack: str, pool: str, template: ResolvedTemplate, gateway_port: int | None,
                      subnet: ipaddress.IPv4Network) -> PoolNetwork:
    outbound = outbound_of(template)
    internal = outbound != "direct" and not publishes_ports(template)
    kind = f"{outbound}-{'internal' if internal else 'routed'}"
    return PoolNetwork(
        pool=pool,
        name=docker_name(stack, pool),
        # The kind is part of the name: a rule left behind for an old bridge can never apply to a
        # bridge of another kind that reuses the name.
        bridge=bridge_name(stack, pool, kind),
        internal=internal,
        outbound=outbound,
        gateway_port=gateway_port if outbound == "gateway" else None,
        subnet=subnet,
        refused=refused_destinations(template) if outbound == "direct" else (),
        url_ports=url_ports(template),
        log_queue=log_queue(stack) if template.network.logs_connections else None,
        resolver_options=name_options(template.network) if has_resolver(template) else (),
        connections=template.network.connections if outbound == "direct" else None,
    )


def guard_rules(network: PoolNetwork) -> list[str]:
    """iptables rules (without the command) that the host guard keeps in place for one pool bridge."""
    br = network.bridge
    rules = [f"INPUT -i {br} {NOT_ESTABLISHED} -j DROP"]
    if network.gateway_port is not None:
        port = network.gateway_port
        gateway = network.gateway_ip
        # icc is off on the bridge; these two rules open exactly the gateway's port, to the gateway only.
        rules.append(f"DOCKER-USER -i {br} -o {br} -d {gateway}/32 -p tcp --dport {port} -j ACCEPT")
        rules.append(f"DOCKER-USER -i {br} -o {br} -s {gateway}/32 -p tcp --sport {port} {ESTABLISHED} -j ACCEPT")
        # Listed after the ACCEPT, so the guard inserts them above it: past the bound, a new connection
        # is reset instead of taking one more of squid's file descriptors.
        new = f"DOCKER-USER -i {br} -o {br} -d {gateway}/32 -p tcp --dport {port} --syn -m connlimit"
        rules.append(f"{new} --connlimit-above {GATEWAY_CONNECTIONS_PER_POOL} --connlimit-mask 0 "
                     "-j REJECT --reject-with tcp-reset")
        rules.append(f"{new} --connlimit-above {GATEWAY_CONNECTIONS_PER_SANDBOX} --connlimit-mask 32 "
                     "-j REJECT --reject-with tcp-reset")
    if network.url_ports:
        ingress, ports = network.ingress_ip, ",".join(map(str, network.url_ports))
        # The ingress may open connections to the sandboxes' url ports, and only those; the sandboxes may only
        # answer (icc is off, so without these nothing passes, and a sandbox can never reach the proxy first).
        rules.append(f"DOCKER-USER -i {br} -o {br} -s {ingress}/32 -d {network.sandbox_range} -p tcp "
                     f"-m multiport --dports {ports} -j ACCEPT")
        rules.append(f"DOCKER-USER -i {br} -o {br} -s {network.sandbox_range} -d {ingress}/32 -p tcp "
                     f"-m multiport --sports {ports} {ESTABLISHED} -j ACCEPT")
    if network.log_queue is not None:
        # Every new connection out (any protocol) waits in the connection logger's queue until its line is written:
        # the logger hands it back marked, and it runs through the chain again past this rule. No logger, or a
        # full queue, and it is dropped (no --queue-bypass): nothing passes unlogged. Listed before the bounds and
        # the refusals, which the guard inserts above it: a refused connection is dropped, not logged.
        rules.append(f"DOCKER-USER -i {br} ! -o {br} -m conntrack --ctstate NEW -m mark ! --mark {LOGGED_MARK} "
                     f"-j NFQUEUE --queue-num {network.log_queue}")
    if network.connections is not None:
        rules += connection_bounds(network)
    if network.resolver:
        # Its names from the host's logging resolver on the bridge's address, the one host service it reaches
        # (inserted above the bridge's INPUT drop).
        rules += [f"INPUT -i {br} -d {network.resolver}/32 -p {proto} --dport 53 -j ACCEPT" for proto in ("udp", "tcp")]
    for match in network.refused:
        rules.append(f"DOCKER-USER -i {br} ! -o {br} {match} -j DROP")
    if not network.internal and network.outbound != "direct":
        # Routed only to publish ports: answers to inbound connections leave, nothing new does.
        rules.append(f"DOCKER-USER -i {br} ! -o {br} {NOT_ESTABLISHED} -j DROP")
    return rules


def connection_bounds(network: PoolNetwork) -> list[str]:
    """A direct route's bounds on its new connections (per sandbox, per pool) and on the connections it holds in
    the host's connection tracking (per sandbox, per pool), each refusing the connection past it. In the order the
    guard inserts them, so the chain holds the open bounds first, then the rates, then the logger's queue."""
    br, bounds = network.bridge, network.connections
    new = f"DOCKER-USER -i {br} ! -o {br} -m conntrack --ctstate NEW"
    refuse = "-j REJECT --reject-with icmp-admin-prohibited"
    # A connection the logger handed back has been counted once already.
    unlogged = f" -m mark ! --mark {LOGGED_MARK}" if network.log_queue is not None else ""
    name = hashlib.sha256(br.encode()).hexdigest()[:12]  # hashlimit names are host-wide, at most 15 characters
    rate = f"--hashlimit-above {{0}}/second --hashlimit-burst {{0}} --hashlimit-name sx{name}"
    return [
        f"{new}{unlogged} -m hashlimit {rate.format(bounds.pool_rate)}p {refuse}",
        f"{new}{unlogged} -m hashlimit {rate.format(bounds.rate)}s --hashlimit-mode srcip {refuse}",
        f"{new}{unlogged} -m connlimit --connlimit-above {bounds.pool_open} --connlimit-mask 0 {refuse}",
        f"{new}{unlogged} -m connlimit --connlimit-above {bounds.open} --connlimit-mask 32 {refuse}",
    ]


def ingress_bridge_rules(bridge: str) -> list[str]:
    """The ingress's own network, where its port is published: it opens no connection to the host (beside a runtime
    too: the ingress reaches the runtime by a unix socket, not by the host's address on this bridge)."""
    return [f"INPUT -i {bridge} {NOT_ESTABLISHED} -j DROP"]


def egress_bridge_rules(bridge: str, allow_metadata: bool, resolver: str | None = None) -> list[str]:
    """The gateway's outbound bridge: the gateway may reach the internet, never the host's services (but its
    logging resolver on the bridge's address), nor link-local/metadata addresses unless a pool on the host opted
    in (squid refuses them per pool)."""
    rules = [f"INPUT -i {bridge} {NOT_ESTABLISHED} -j DROP"]
    if resolver:
        rules += [f"INPUT -i {bridge} -d {resolver}/32 -p {proto} --dport 53 -j ACCEPT" for proto in ("udp", "tcp")]
    if not allow_metadata:
        rules += [f"DOCKER-USER -i {bridge} ! -o {bridge} -d {c} -j DROP" for c in ipv4_only(METADATA_RANGES)]
    return rules
