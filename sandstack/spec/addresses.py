"""The address lock: the memory of each host's allocated addresses, in a file beside the spec
(docs/design/addresses.md).

A pool's network is a /23 of its host's `subnet_pool`, its gateway port one of 30000-39999, and a host's egress
and ingress networks have a /23 each; the plan picks each by hashing its name and probing past the ones taken
(sandstack.plan.addresses). Without memory, a new pool that collides and sorts first takes an existing pool's slot,
which replaces that pool's network and sandboxes. The lock (`<spec>.lock` beside `<spec>.yaml`, written by
`sandstack lock`) holds every allocation, so the plan takes them as given and allocates only what the lock lacks.
A pool's logging resolver listens on its subnet's first address and the gateway's on the egress subnet's, so the
subnets the lock holds hold them too.

This module says what a host needs addresses for, and reads and checks a lock against a spec (the loader attaches it
to the resolved stack as a plain value; the plan never reads a file); sandstack.spec.lockfile is its content and
text. A lock is refused, located in its file, when it was edited by hand (its digest does
not match its content, two networks overlap, a subnet is not a /23 of the subnet_pool, a port is out of range) or is
stale (a host or pool of the spec missing, one the spec no longer has, a subnet_pool changed, a gateway port or an
egress or ingress subnet the spec now needs or no longer does): `sandstack lock` writes it anew.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from sandstack.spec.errors import Diagnostic, JsonPath, SpecError
from sandstack.spec.loader import Document, load
from sandstack.spec.lockfile import (GATEWAY_PORT_BASE, GATEWAY_PORT_SPAN, LOCK_SUFFIX, AddressLock, HostLock,
                                     PoolLock, lock_path, render)
from sandstack.spec.models import Host
from sandstack.spec.models.hosts import POOL_SUBNET_PREFIX
from sandstack.spec.resolve import ResolvedStack, ResolvedTemplate

__all__ = ["GATEWAY_PORT_BASE", "GATEWAY_PORT_SPAN", "LOCK_SUFFIX", "AddressLock", "HostLock", "HostNeeds", "PoolLock",
           "host_needs", "lock_beside", "lock_path", "read_lock", "render", "stack_needs", "stale"]

RULE = "lock"


# --- what a host's addresses are: its pools', its egress and ingress networks' ---------------------------------

@dataclass(frozen=True)
class HostNeeds:
    """What a host needs addresses for: every pool placed on it a subnet, each gateway pool a port, the egress
    network a subnet when it has a gateway pool, the ingress's network one when an ingress runs beside a runtime."""

    subnet_pool: str
    pools: tuple[str, ...]  # sorted
    gateway_pools: tuple[str, ...]  # sorted
    ingress: bool

    @property
    def egress(self) -> bool:
        return bool(self.gateway_pools)


def host_needs(host: Host, pools: Iterable[tuple[str, ResolvedTemplate]]) -> HostNeeds:
    placed = dict(pools)
    return HostNeeds(host.subnet_pool, tuple(sorted(placed)),
                     tuple(sorted(p for p, t in placed.items() if t.network.outbound == "gateway")),
                     host.ingress is not None and host.runtime is not None)


def stack_needs(spec: ResolvedStack) -> dict[str, HostNeeds]:
    """Every host's needs, by host, in spec order (a host without pools needs none but may have an ingress)."""
    placed: dict[str, list[tuple[str, ResolvedTemplate]]] = {host: [] for host in spec.hosts}
    for name, pool in spec.pools.items():
        for host in dict.fromkeys(pool.hosts):
            placed[host].append((name, spec.templates[pool.template]))
    return {host: host_needs(spec.hosts[host], pools) for host, pools in placed.items()}


# --- reading and checking a lock --------------------------------------------------------------------------------

SHAPE = ("a lock holds 'version: 1', 'hosts' (each with its subnet_pool, egress_subnet, ingress_subnet and pools, each "
         "pool with its subnet and gateway_port) and 'digest', as `sandstack lock` writes it")
_SHAPE = {"missing": "is missing", "extra_forbidden": "is not a key of a lock", "literal_error": "is not 1"}


def read_lock(path: Path, display: str) -> tuple[AddressLock | None, Document | None, list[Diagnostic]]:
    """A lock file parsed and checked on its own (structure, digest, addresses): (lock, document, diagnostics)."""
    try:
        doc = load(path, display)
    except SpecError as error:
        return None, None, error.diagnostics
    if not isinstance(doc.data, dict):
        return None, doc, [doc.diagnostic((), "a lock is a mapping with 'version', 'hosts' and 'digest'", RULE)]
    try:
        lock = AddressLock.model_validate(doc.data)
    except ValidationError as exc:
        return None, doc, [doc.diagnostic(tuple(err["loc"]), f"{_SHAPE.get(err['type'], 'is not of its type')}: "
                                          f"{SHAPE}", RULE, key=err["type"] == "extra_forbidden")
                           for err in exc.errors()]
    return lock, doc, hand_edits(lock, doc)


def hand_edits(lock: AddressLock, doc: Document) -> list[Diagnostic]:
    """What `sandstack lock` never writes: a digest that does not match, a subnet that is not a /23 of the host's
    subnet_pool or that overlaps another, a gateway port out of range or held twice."""
    out = []
    if lock.digest != lock.computed_digest():
        out.append(doc.diagnostic(("digest",), f"{lock.digest!r} does not match the lock's content: it was edited by "
                                  "hand; restore it from git, or delete it and run `sandstack lock` (every address "
                                  "allocated afresh)", RULE))
    for name, host in lock.hosts.items():
        where = ("hosts", name)
        try:
            space = ipaddress.IPv4Network(host.subnet_pool)
        except ValueError:
            out.append(doc.diagnostic((*where, "subnet_pool"), f"{host.subnet_pool!r} is not an IPv4 network", RULE))
            continue
        held: list[tuple[JsonPath, str, ipaddress.IPv4Network]] = []
        nets = [((*where, "pools", pool, "subnet"), f"pool {pool!r}", p.subnet) for pool, p in host.pools.items()]
        nets += [((*where, key), f"the {what} network", value)
                 for key, what, value in (("egress_subnet", "egress", host.egress_subnet),
                                          ("ingress_subnet", "ingress", host.ingress_subnet)) if value is not None]
        for path, owner, text in nets:
            try:
                net = ipaddress.IPv4Network(text)
            except ValueError:
                net = None
            if net is None or net.prefixlen != POOL_SUBNET_PREFIX or not net.subnet_of(space):
                out.append(doc.diagnostic(path, f"{text!r} is not a /{POOL_SUBNET_PREFIX} of the host's subnet_pool "
                                          f"{host.subnet_pool!r}", RULE))
                continue
            other = next(((o, n) for _, o, n in held if n.overlaps(net)), None)
            if other:
                out.append(doc.diagnostic(path, f"{text!r} overlaps {other[0]}'s {str(other[1])!r}: each pool, the "
                                          "egress and the ingress network have a subnet of their own", RULE))
            held.append((path, owner, net))
        ports: dict[int, str] = {}
        for pool, p in host.pools.items():
            if p.gateway_port is None:
                continue
            path = (*where, "pools", pool, "gateway_port")
            if not GATEWAY_PORT_BASE <= p.gateway_port < GATEWAY_PORT_BASE + GATEWAY_PORT_SPAN:
                out.append(doc.diagnostic(path, f"{p.gateway_port} is not a gateway port: one of "
                                          f"{GATEWAY_PORT_BASE}-{GATEWAY_PORT_BASE + GATEWAY_PORT_SPAN - 1}", RULE))
            elif p.gateway_port in ports:
                out.append(doc.diagnostic(path, f"{p.gateway_port} is also pool {ports[p.gateway_port]!r}'s gateway "
                                          "port: each gateway pool has its own", RULE))
            else:
                ports[p.gateway_port] = pool
    return out


def stale(lock: AddressLock, doc: Document, needs: dict[str, HostNeeds], spec_name: str) -> list[Diagnostic]:
    """Where the lock and the spec disagree about what has addresses: each is a located error that `sandstack
    lock` resolves (a new allocation, or a freed one), never a silent allocation at deploy time."""
    run = f"run `sandstack lock {spec_name}`"
    out = []
    for name in needs:
        if name not in lock.hosts:
            out.append(doc.diagnostic(("hosts",), f"host {name!r} of {spec_name} has no addresses here: {run}", RULE,
                                      key=True))
    for name, host in lock.hosts.items():
        where = ("hosts", name)
        need = needs.get(name)
        if need is None:
            out.append(doc.diagnostic(where, f"{name!r}: {spec_name} has no host {name!r}: {run} to free its "
                                      "addresses", RULE, key=True))
            continue
        if host.subnet_pool != need.subnet_pool:
            out.append(doc.diagnostic((*where, "subnet_pool"), f"{host.subnet_pool!r}: host {name!r}'s subnet_pool is "
                                      f"{need.subnet_pool!r} in {spec_name}: {run} to allocate its addresses there",
                                      RULE))
            continue
        for pool in need.pools:
            if pool not in host.pools:
                out.append(doc.diagnostic((*where, "pools"), f"pool {pool!r} on host {name!r} has no addresses here: "
                                          f"{run} to allocate them (no other pool's addresses move)", RULE, key=True))
        for pool, p in host.pools.items():
            path = (*where, "pools", pool)
            if pool not in need.pools:
                out.append(doc.diagnostic(path, f"{pool!r}: {spec_name} places no pool {pool!r} on host {name!r}: "
                                          f"{run} to free its addresses", RULE, key=True))
            elif pool in need.gateway_pools and p.gateway_port is None:
                out.append(doc.diagnostic(path, f"pool {pool!r} egresses through the gateway but has no gateway_port "
                                          f"here: {run} to allocate one", RULE, key=True))
            elif pool not in need.gateway_pools and p.gateway_port is not None:
                out.append(doc.diagnostic((*path, "gateway_port"), f"{p.gateway_port}: pool {pool!r} no longer "
                                          f"egresses through the gateway: {run} to free its port", RULE))
        for key, what, needed, held in (("egress_subnet", "a gateway pool", need.egress, host.egress_subnet),
                                        ("ingress_subnet", "an ingress beside a runtime", need.ingress,
                                         host.ingress_subnet)):
            if needed and held is None:
                out.append(doc.diagnostic(where, f"host {name!r} has {what} but no {key} here: {run} to allocate it",
                                          RULE, key=True))
            elif held is not None and not needed:
                out.append(doc.diagnostic((*where, key), f"{held!r}: host {name!r} no longer has {what}: {run} to free "
                                          "it", RULE))
    return out


def lock_beside(spec_path: Path, display: str | None, spec: ResolvedStack) -> tuple[AddressLock | None,
                                                                                     list[Diagnostic]]:
    """The lock beside a spec file, checked against the spec: (None, []) when there is none."""
    path = lock_path(spec_path)
    if not path.exists():
        return None, []
    name = display or str(spec_path)
    lock, doc, problems = read_lock(path, str(lock_path(name)))
    if lock is None or doc is None or problems:
        return None, problems
    return lock, stale(lock, doc, stack_needs(spec), name)
