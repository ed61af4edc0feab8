"""What a resolved stack reserves of its hosts: per pool, per host and for the stack, the CPUs, memory, disk, GPUs
and sandboxes its pools' limits add up to, warm (`replicas`) and at the on-demand ceiling (`max`) apart, beside
each host's declared `capacity` and what `overcommit` allows. A pool with size classes counts each sandbox at
the ceiling at its largest class (sandstack.spec.resolve.largest_size): any of them may be claimed at it.

One arithmetic for every reader: the review's capacity section and its `--fail-on capacity` (sandstack.review.
capacity), the organisation's bounds on a host's or a stack's total (sandstack.policy.org) and the price list
(sandstack.review.cost). The `host-capacity` rule (sandstack.spec.rules.capacity) checks the same sums against the
same allowance: the ceiling, since what the runtime may create on demand must fit too.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from sandstack.spec.resolve import EffectiveLimits, ResolvedStack, largest_size

DIMENSIONS = ("cpus", "memory", "disk", "gpus", "sandboxes")


@dataclass(frozen=True)
class Amount:
    """Reserved resources: CPUs, bytes of memory and disk, GPUs, sandboxes."""

    cpus: float = 0.0
    memory: int = 0
    disk: int = 0
    gpus: int = 0
    sandboxes: int = 0

    def __add__(self, other: Amount) -> Amount:
        return Amount(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __sub__(self, other: Amount) -> Amount:
        return Amount(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(self)))

    def times(self, n: int) -> Amount:
        return Amount(self.cpus * n, self.memory * n, self.disk * n, self.gpus * n, self.sandboxes * n)

    def get(self, dim: str) -> float:
        return getattr(self, dim)

    def to_json(self) -> dict[str, float | int]:
        # CPUs in millicores' precision: a sum of 0.1s must not print as 0.30000000000000004.
        return {"cpus": round(self.cpus, 3), "memory": self.memory, "disk": self.disk, "gpus": self.gpus,
                "sandboxes": self.sandboxes}


@dataclass(frozen=True)
class PoolReserve:
    pool: str
    template: str
    hosts: tuple[str, ...]
    each: Amount  # one sandbox at the pool's own limits (what a warm one holds while idle)
    warm: Amount  # replicas × hosts
    ceiling: Amount  # max (or replicas) × hosts, each at the largest size class (`largest`), and the disk and GPUs of
    # the places of hibernated sessions (`max_hibernated`)
    largest: Amount | None = None  # one sandbox at its largest size class; None: the pool declares no classes

    def to_json(self) -> dict:
        out = {"pool": self.pool, "template": self.template, "hosts": list(self.hosts), "each": self.each.to_json(),
               "warm": self.warm.to_json(), "ceiling": self.ceiling.to_json()}
        if self.largest is not None:
            out["largest"] = self.largest.to_json()
        return out


@dataclass(frozen=True)
class HostReserve:
    host: str
    warm: Amount
    ceiling: Amount
    capacity: Amount  # declared (sandboxes 0: a host declares no count)
    allowed: Amount  # capacity × overcommit (GPUs are never overcommitted)

    def to_json(self) -> dict:
        return {"host": self.host, "warm": self.warm.to_json(), "ceiling": self.ceiling.to_json(),
                "capacity": self.capacity.to_json(), "allowed": self.allowed.to_json()}


@dataclass(frozen=True)
class Reservations:
    pools: dict[str, PoolReserve]
    hosts: dict[str, HostReserve]

    @property
    def warm(self) -> Amount:
        return sum((p.warm for p in self.pools.values()), Amount())

    @property
    def ceiling(self) -> Amount:
        return sum((p.ceiling for p in self.pools.values()), Amount())

    @property
    def capacity(self) -> Amount:
        return sum((h.capacity for h in self.hosts.values()), Amount())


def _amount(limits: EffectiveLimits) -> Amount:
    return Amount(limits.cpus, limits.memory, limits.disk, limits.gpus.count if limits.gpus else 0, 1)


def reservations(spec: ResolvedStack) -> Reservations:
    pools = {}
    per_host: dict[str, tuple[Amount, Amount]] = {name: (Amount(), Amount()) for name in spec.hosts}
    for name, pool in spec.pools.items():
        limits = spec.templates[pool.template].limits
        each = _amount(limits)
        # Any sandbox may be claimed at the pool's largest class: the ceiling counts every one at it.
        largest = _amount(largest_size(pool, limits)) if pool.sizes else None
        top = largest or each
        hosts = tuple(dict.fromkeys(pool.hosts))
        # The places hibernated sessions may hold (`max_hibernated`) keep their disk and their GPU devices (each
        # place has its own), never CPUs or memory: what the host must hold beside the running ceiling.
        hibernated = Amount(disk=top.disk, gpus=top.gpus).times(pool.places - pool.ceiling)
        at_ceiling = top.times(pool.ceiling) + hibernated
        for host in hosts:
            warm, ceiling = per_host.get(host, (Amount(), Amount()))
            per_host[host] = (warm + each.times(pool.replicas), ceiling + at_ceiling)
        pools[name] = PoolReserve(name, pool.template, hosts, each, each.times(pool.replicas * len(hosts)),
                                  at_ceiling.times(len(hosts)), largest)
    hosts = {}
    for name, (warm, ceiling) in per_host.items():
        spec_host = spec.hosts.get(name)
        if spec_host is None:
            continue
        c, o = spec_host.capacity, spec_host.overcommit
        gpus = sum(g.count for g in c.gpus)
        hosts[name] = HostReserve(name, warm, ceiling, Amount(c.cpus, c.memory, c.disk, gpus),
                                  Amount(c.cpus * o.cpus, int(c.memory * o.memory), int(c.disk * o.disk), gpus))
    return Reservations(pools, hosts)
