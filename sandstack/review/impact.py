"""What a diff does to the people using the stack, in one place: the impact headline's data.

Pure values built from a `Diff` (sandstack.review.diff) and nothing else, so the text, markdown and JSON formats
say the same: per pool, the sandboxes restarting (a replaced sandbox loses its processes and what it wrote to
its writable paths), updated in place, created and destroyed; each host service renewed and what its renewal
interrupts (a gateway: the egress of every gateway pool on its host; a runtime: its sessions API; an ingress:
its URLs; the guard and the connection logger: what they enforce and log); each volume whose data is lost; and
how many security findings got looser or tighter. Identical rows on several hosts are folded into one row
naming the hosts ("node-a, node-b").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandstack.plan.resolver import GATEWAY_RESOLVER
from sandstack.review.diff import COMPONENT_TYPE, Diff, ResourceChange
from sandstack.spec.roles import HOST_ROLES, parts_of

# What a renewed host service interrupts while its container is replaced (or updated), by resource kind: each host
# role's words (sandstack.spec.roles, `Part.interrupts`). `{pools}` is the pools the service serves on that host
# (from the resource's own settings), `{sites}` the ingress URLs, `{resolved}` and `{logged}` the logger's pools.
INTERRUPTS = {kind: part.interrupts for kind, part in parts_of().items() if part.interrupts and not part.config}
# A role taking a new configuration in place (its reload container run again), by that container's kind: the role,
# and what the reload interrupts (its descriptor's words: nothing).
RELOADS = {part.kind: (role.name, f"interrupts {role.reload_interrupts} — it {role.reload_words}")
           for role in HOST_ROLES.values() for part in role.parts if part.config and part.resource == "container"}
# Volumes whose contents a replace or delete throws away, and what they held: each host role's volume
# (`Part.holds`) and a sandbox's disk workspaces. A secrets volume is re-seeded and a data volume reloaded from the
# spec's files: nothing written by a user is in them.
HOLDS = {"disk workspace": "files written to the disk workspace",
         **{kind: part.holds for kind, part in parts_of().items() if part.holds}}
LOGGER = HOST_ROLES["logger"].part("container").kind
ROLE_OF = {role.container.kind: role.name for role in HOST_ROLES.values() if role.container}  # a service's kind
SANDBOX_LOSES = "processes and writable paths lost"


@dataclass(frozen=True)
class PoolImpact:
    """One pool's sandboxes across the hosts they change on (`hosts`, sorted)."""

    pool: str
    hosts: tuple[str, ...]
    restart: int = 0  # replaced: processes and writable paths lost
    update: int = 0  # updated in place, keep running
    create: int = 0
    destroy: int = 0
    causes: tuple[str, ...] = ()  # spec paths whose change explains it (or the renewed resources it refers to)

    @property
    def action(self) -> str:
        """The one word of a table's action column: the most disruptive of what happens to the pool."""
        for word, n in (("replace", self.restart), ("delete", self.destroy), ("create", self.create),
                        ("update", self.update)):
            if n:
                return word
        return "none"

    def to_json(self) -> dict[str, Any]:
        return {"pool": self.pool, "hosts": list(self.hosts), "restart": self.restart, "update": self.update,
                "create": self.create, "destroy": self.destroy, "action": self.action, "causes": list(self.causes)}


@dataclass(frozen=True)
class ServiceImpact:
    """A host service renewed (its container replaced, updated or deleted) on `hosts`, with what that interrupts."""

    kind: str  # a resource kind of INTERRUPTS: gateway, runtime, ingress, guard, connection logger, ...
    action: str  # create, update, replace, delete
    hosts: tuple[str, ...]
    interrupts: str
    causes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "action": self.action, "hosts": list(self.hosts), "interrupts": self.interrupts,
                "causes": list(self.causes)}


@dataclass(frozen=True)
class DataLoss:
    """A volume replaced or deleted on `hosts`: what it held is gone."""

    kind: str  # a resource kind of HOLDS
    action: str  # replace or delete
    hosts: tuple[str, ...]
    count: int  # volumes of this kind (one per host, or per sandbox for disk workspaces)
    lost: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "action": self.action, "hosts": list(self.hosts), "count": self.count,
                "lost": self.lost}


@dataclass(frozen=True)
class Impact:
    pools: tuple[PoolImpact, ...]
    services: tuple[ServiceImpact, ...]
    data: tuple[DataLoss, ...]
    looser: int  # security findings that loosen
    tighter: int
    capacity: str = ""  # the stack's net reservation change and its fullest host (sandstack.review.capacity)
    cost: str = ""  # the monthly figure before → after, where the platform declares prices (sandstack.review.cost)

    @property
    def restart(self) -> int:
        return sum(p.restart for p in self.pools)

    @property
    def renewed(self) -> tuple[ServiceImpact, ...]:
        return tuple(s for s in self.services if s.action != "reload")

    @property
    def reloaded(self) -> tuple[ServiceImpact, ...]:
        return tuple(s for s in self.services if s.action == "reload")

    @property
    def create(self) -> int:
        return sum(p.create for p in self.pools)

    @property
    def destroy(self) -> int:
        return sum(p.destroy for p in self.pools)

    def headline(self) -> str:
        """One line: what a reviewer must know first."""
        parts = [f"{self.restart} sandbox{'es' if self.restart != 1 else ''} restart"
                 + (f" ({SANDBOX_LOSES})" if self.restart else ""),
                 f"{self.create} created", f"{self.destroy} destroyed"]
        services = sum(len(s.hosts) for s in self.renewed)
        parts.append(f"{services} host service{'s' if services != 1 else ''} renewed")
        reloaded = sum(len(s.hosts) for s in self.reloaded)
        if reloaded:
            quiet = all(s.interrupts.startswith("interrupts nothing ") for s in self.reloaded)
            parts.append(f"{reloaded} reloaded in place" + (" (no interruption)" if quiet else ""))
        lost = sum(d.count for d in self.data)
        parts.append(f"{lost} volume{'s' if lost != 1 else ''} of data lost" if lost else "no data lost")
        parts.append(f"{self.looser} change{'s' if self.looser != 1 else ''} less safe" if self.looser
                     else "nothing less safe")
        return " ".join(filter(None, ("Impact: " + ", ".join(parts) + ".", self.capacity, self.cost)))

    def lines(self) -> list[str]:
        """The headline's detail, one line per pool, service and lost volume (hosts folded)."""
        out = []
        for p in self.pools:
            counts = [f"{n} {w}" for n, w in ((p.restart, f"restart ({SANDBOX_LOSES})"), (p.update, "updated in place"),
                                               (p.create, "created"), (p.destroy, "destroyed")) if n]
            out.append(f"pool {p.pool} on {', '.join(p.hosts)}: {', '.join(counts)}"
                       + (f" — {', '.join(p.causes)}" if p.causes else ""))
        for s in self.services:
            out.append(f"{s.kind} {VERB[s.action]} on {', '.join(s.hosts)}: {s.interrupts}")
        for d in self.data:
            out.append(f"data lost: {d.kind} {VERB[d.action]} on {', '.join(d.hosts)}"
                       + (f" ({d.count})" if d.count > len(d.hosts) else "") + f": {d.lost}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"restart": self.restart, "create": self.create, "destroy": self.destroy,
                "pools": [p.to_json() for p in self.pools], "services": [s.to_json() for s in self.services],
                "data_lost": [d.to_json() for d in self.data], "looser": self.looser, "tighter": self.tighter,
                "capacity": self.capacity, "cost": self.cost}


VERB = {"create": "created", "update": "updated in place", "replace": "replaced", "reload": "reloaded in place",
        "delete": "deleted"}


def _causes(changes: list[ResourceChange]) -> tuple[str, ...]:
    out: dict[str, None] = {}
    for c in changes:
        for reason in c.reasons:
            out[reason.path] = None
        if not c.reasons:
            for name in c.renewed_with:
                out[f"renewed {name}"] = None
    return tuple(out)


def _names(values: Any) -> str:
    names = sorted(values or ())
    return ", ".join(names) if names else "(none)"


def _interrupts(c: ResourceChange) -> str:
    props = c.resource.props
    pools = props.get("pools") or props.get("logged_pools") or ()
    # The logger resolves names for every pool with a resolver (GATEWAY_RESOLVER: the gateway's own lookups).
    resolvers = list(props.get("resolvers") or ())
    resolved = _names(p for p in resolvers if p != GATEWAY_RESOLVER) + (
        " and of the gateway" if GATEWAY_RESOLVER in resolvers else "")
    logged = f", and the connection log of pools {_names(pools)}," if c.resource.kind == LOGGER and pools else ""
    # Counted, not listed: each URL names its host, and a count lets identical hosts fold into one row.
    sites = len(props.get("sites") or ())
    return INTERRUPTS[c.resource.kind].format(pools=_names(pools), sites=f"{sites} URL{'s' if sites != 1 else ''}",
                                              resolved=resolved, logged=logged)


def _fold(rows: dict[tuple, list[ResourceChange]]) -> dict[tuple, tuple[tuple[str, ...], list[ResourceChange]]]:
    """Rows keyed by what they say, each with the hosts it holds on."""
    return {key: (tuple(sorted({c.resource.host or "(stack)" for c in group})), group) for key, group in rows.items()}


def impact(diff: Diff) -> Impact:
    changes = [c for c in diff.changes if not c.resource.type.startswith(COMPONENT_TYPE)]
    pools: dict[str, list[ResourceChange]] = {}
    services: dict[tuple, list[ResourceChange]] = {}
    data: dict[tuple, list[ResourceChange]] = {}
    for c in changes:
        kind = c.resource.kind
        if kind == "sandbox":
            pools.setdefault(c.resource.pool or "", []).append(c)
        elif c.reload:
            role, words = RELOADS[kind]
            services.setdefault((role, "reload", words), []).append(c)
        elif kind in INTERRUPTS and c.action != "create":
            services.setdefault((kind, c.action, _interrupts(c)), []).append(c)
        elif kind in HOLDS and c.action in ("replace", "delete"):
            data.setdefault((kind, c.action), []).append(c)
    pool_rows = []
    for name in sorted(pools):
        group = pools[name]
        count = {a: sum(1 for c in group if c.action == a) for a in VERB}
        pool_rows.append(PoolImpact(name, tuple(sorted({c.resource.host or "" for c in group})), count["replace"],
                                    count["update"], count["create"], count["delete"], _causes(group)))
    # A reload that follows its renewed service (it names it) is part of that renewal, not news of its own.
    renewed = {(ROLE_OF[c.resource.kind], c.resource.host) for c in changes
               if c.resource.kind in ROLE_OF and c.action != "update" and not c.reload}
    services = {key: kept for key, group in services.items()
                if (kept := [c for c in group if not (c.reload and (key[0], c.resource.host) in renewed)])}
    service_rows = [ServiceImpact(kind, action, hosts, words, _causes(group))
                    for (kind, action, words), (hosts, group) in sorted(_fold(services).items())]
    data_rows = [DataLoss(kind, action, hosts, len(group), HOLDS[kind])
                 for (kind, action), (hosts, group) in sorted(_fold(data).items())]
    looser = sum(1 for f in diff.security if f.loosens)
    return Impact(tuple(pool_rows), tuple(service_rows), tuple(data_rows), looser, len(diff.security) - looser,
                  diff.reserved.headline() if diff.reserved is not None else "",
                  diff.cost.headline() if diff.cost is not None else "")
