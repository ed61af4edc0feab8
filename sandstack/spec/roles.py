"""The host roles, one descriptor each: every table that names a role reads it here.

A host role is a part of a Docker host that sandstack keeps beside the sandboxes: its provider, the infra image,
the pool networks, and the host's own services (guard, gateway, connection logger, ingress, runtime). Each is one
`HostRoleInfo`: its name (the change table's word, `Effect.host`), what the reference and the diff say renewing it
renews, its component's Pulumi type token (the CrossGuard pack tells sandstack's own containers by it), the nodes
it owns (`Part`: what a reviewer calls each, its logical name under the host, what its replacement interrupts or
throws away), and how its configuration reaches it and how it takes a new one.

The plan (sandstack.plan.stack_host) names and tags its nodes from these descriptors; the change table
(sandstack.spec.changes), the review (resources, preview, diagram, reasons, impact) and CrossGuard read them, and
the review's own tables keyed by role or kind are checked complete against them when imported, so a role missing
from one of them is an error, never a silent gap. A leaf module: it imports nothing of sandstack.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PACKAGE = "sandstack:index:"  # the type token prefix of sandstack's components (sandstack.plan.types)

Resource = Literal["provider", "image", "network", "volume", "container"]


@dataclass(frozen=True)
class Part:
    """One node a host role owns."""

    kind: str  # what a reviewer calls it (the plan's `About.kind`)
    name: str  # its logical name after `<component>-<host>-`; `{pool}` for one node per pool
    resource: Resource
    element: str  # what the review reads and draws as one thing with others (the role's name, or its own)
    holds: str = ""  # a volume: what its replacement or deletion throws away
    interrupts: str = ""  # what its replacement interrupts (review words; `{pools}`, `{sites}`… from its settings)
    # Its configuration volume or reload container (sandstack.plan.reload): the nodes a configuration change renews
    # while the role's own container keeps running.
    config: bool = False

    @property
    def per_pool(self) -> bool:
        return "{pool}" in self.name

    def matches(self, part: str) -> bool:
        """Whether a logical name's part after `<component>-<host>-` is this node's (for one of its pools)."""
        if not self.per_pool:
            return part == self.name
        head, _, tail = self.name.partition("{pool}")
        return part.startswith(head) and part.endswith(tail) and len(part) > len(head) + len(tail)

    def __post_init__(self) -> None:
        if self.resource == "volume" and not self.holds:
            raise ValueError(f"part {self.kind!r}: a volume says what its replacement throws away (`holds`)")
        if self.resource == "container" and not self.interrupts:
            raise ValueError(f"part {self.kind!r}: a container says what its restart interrupts (`interrupts`)")


@dataclass(frozen=True)
class HostRoleInfo:
    """One host role. `config`, `reload` and `reload_interrupts` say how a changed configuration reaches the role
    and how it takes it: today every role's configuration is its nodes' inputs, and it takes a new one by being
    restarted (its container replaced), which interrupts what its container part says; a role that reloads in
    place will say what that reload interrupts (`reload_interrupts`)."""

    name: str  # the change table's word (`Effect.host`, the reference's Change column)
    words: str  # what renewing it renews, as the reference and the diff say it
    parts: tuple[Part, ...]
    component: str | None = None  # its component's type token; None: its nodes sit under the host itself
    per_pool: bool = False  # holds per-pool configuration: a pool placed on its host or taken off renews it
    # How its configuration reaches it: its nodes' inputs, or a configuration volume its reload container fills.
    config: Literal["inputs", "volume"] = "inputs"
    # How it takes a new configuration: restarted (its container replaced), or in place (it watches the volume).
    reload: Literal["restart", "in place"] = "restart"
    reload_interrupts: str = "nothing"  # what taking a new configuration in place interrupts (review words)
    reload_words: str = ""  # how it takes one in place, as the reference and the review say it

    def __post_init__(self) -> None:
        containers = [p for p in self.parts if p.resource == "container" and not p.config]
        if len(containers) > 1:
            raise ValueError(f"host role {self.name!r}: one container at most, not {len(containers)}")
        if containers and self.component is None:
            raise ValueError(f"host role {self.name!r}: a role with a container has its own component")
        config = {p.resource for p in self.parts if p.config}
        if (self.config == "volume") != (config == {"volume", "container"}) or \
                (self.config == "volume") != (self.reload == "in place") or (self.reload == "in place") != bool(
                    self.reload_words):
            raise ValueError(f"host role {self.name!r}: a configuration volume goes with a reload container, a reload "
                             f"in place and its words, or none of them")

    @property
    def container(self) -> Part | None:
        """Its container (a host service, on the infra image), or None."""
        return next((p for p in self.parts if p.resource == "container" and not p.config), None)

    @property
    def restart_interrupts(self) -> str:
        """What restarting it interrupts: its container's words ('' for a role without a container)."""
        return self.container.interrupts if self.container else ""

    def part(self, resource: Resource, per_pool: bool | None = None, config: bool = False) -> Part:
        """Its one part of this resource type (its container, its volume, …; one per pool or not, if said; its
        configuration volume or reload container with `config`)."""
        found = [p for p in self.parts if p.resource == resource and per_pool in (None, p.per_pool)
                 and p.config == config]
        if len(found) != 1:
            raise KeyError(f"host role {self.name!r} has {len(found)} {resource} parts, not one")
        return found[0]


def _config(role: str, words: str, interrupts: str = "nothing") -> tuple[Part, Part]:
    """A role's configuration volume and its reload container (sandstack.plan.reload): `words` say how it takes a
    new configuration in place, `interrupts` what that interrupts."""
    return (Part(f"{role} configuration", f"{role}-config", "volume", role, config=True,
                 holds=f"the {role}'s configuration sets (its reload container writes the one in force again)"),
            Part(f"{role} reload", f"{role}-reload", "container", role, config=True,
                 interrupts=f"{interrupts}: the {role} {words}"))


GUARD_RELOAD = "applies the new rules, pids limits and lifetimes at its next pass; its clocks keep running"
GATEWAY_RELOAD = ("re-reads its squid config (a new pool's network joined first) and keeps its connections and "
                  "listening ports")
INGRESS_RELOAD = "loads its new Caddyfile through its admin API (a url pool's network joined first) and keeps its connections"
LOGGER_RELOAD = ("restarts only the resolvers whose options changed (or of pools added or taken off) and keeps its "
                 "connection queue and every other resolver running")
LOGGER_INTERRUPTS = "the name lookups of a pool whose resolver changed, for milliseconds"
RUNTIME_RELOAD = ("swaps in its new pools, ceilings, idle policies, on-demand recipes and token scopes; its sessions, running "
                  "processes, streams and terminals go on (a pool taken off keeps its bound sessions until they end)")

_ROLES = (
    HostRoleInfo(
        "provider", "the Docker provider (every object on the host follows it)",
        (Part("provider", "provider", "provider", "provider"),)),
    HostRoleInfo(
        "infra", "the infra image (guard, gateway and secrets seeders run on it)",
        (Part("infra image", "infra", "image", "infra image"),)),
    HostRoleInfo(
        "guard", "the host guard container (its rules, pids limits and lifecycle lines)",
        (Part("guard state", "guard-state", "volume", "guard", holds="the guard's lifetime and idle clocks"),
         Part("guard", "guard-container", "container", "guard",
              interrupts="the host guard restarts: it applies the firewall rules, pids limits and lifetimes again"),
         *_config("guard", GUARD_RELOAD)),
        component=f"{PACKAGE}HostGuard", per_pool=True, config="volume", reload="in place",
        reload_words=GUARD_RELOAD),
    HostRoleInfo(
        "gateway", "the egress gateway container (squid behind HAProxy)",
        (Part("gateway log", "gateway-log", "volume", "gateway", holds="the gateway's egress request log"),
         Part("gateway", "gateway-container", "container", "gateway",
              interrupts="egress of pools {pools} stops until the new gateway runs (HTTP(S) goes through it)"),
         *_config("gateway", GATEWAY_RELOAD)),
        component=f"{PACKAGE}EgressGateway", per_pool=True, config="volume", reload="in place",
        reload_words=GATEWAY_RELOAD),
    HostRoleInfo(
        "networks", "the pool networks and the egress network",
        (Part("network", "net.{pool}", "network", "network"),
         Part("egress network", "egress-net", "network", "egress network",
              interrupts="the gateway's route out is recreated: egress of gateway pools stops meanwhile")),
        per_pool=True),
    HostRoleInfo(
        "ingress", "the ingress proxy container (its Caddyfile) and its network",
        (Part("ingress network", "ingress-net", "network", "ingress network",
              interrupts="the ingress's network is recreated: its URLs are unreachable meanwhile"),
         Part("ingress data", "ingress-data", "volume", "ingress",
              holds="the ingress's TLS certificates (issued again)"),
         Part("ingress", "ingress-container", "container", "ingress",
              interrupts="its {sites} are unreachable while it restarts"),
         *_config("ingress", INGRESS_RELOAD)),
        component=f"{PACKAGE}IngressProxy", per_pool=True, config="volume", reload="in place",
        reload_words=INGRESS_RELOAD),
    HostRoleInfo(
        "runtime", "the runtime service container (its configuration); its state volume keeps sessions and snapshots",
        (Part("runtime state", "runtime-state", "volume", "runtime", holds="the runtime's sessions and snapshots"),
         # Its state volume keeps sessions and snapshots across a restart; what lives in its memory and in the
         # exec streams it holds does not (docs/design/runtime.md, "State and faults").
         Part("runtime", "runtime-container", "container", "runtime",
              interrupts="its sessions API for pools {pools} is down while it restarts: running processes, their "
                         "output streams and terminals end; sessions and snapshots are kept"),
         *_config("runtime", RUNTIME_RELOAD)),
        component=f"{PACKAGE}RuntimeService", per_pool=True, config="volume", reload="in place",
        reload_words=RUNTIME_RELOAD),
    HostRoleInfo(
        "logger", "the connection logger container (its queue and logging resolvers); its log volume is kept",
        (Part("connection log", "logger-log", "volume", "logger", holds="the connection log"),
         Part("connection logger", "logger-container", "container", "logger",
              interrupts="name lookups of pools {resolved}{logged} stop while it restarts"),
         *_config("logger", LOGGER_RELOAD, LOGGER_INTERRUPTS)),
        component=f"{PACKAGE}ConnectionLogger", per_pool=True, config="volume", reload="in place",
        reload_words=LOGGER_RELOAD, reload_interrupts=LOGGER_INTERRUPTS),
)


def registry(roles: tuple[HostRoleInfo, ...]) -> dict[str, HostRoleInfo]:
    """Roles by name, refusing two roles of one name, one kind or one node name (each names one thing)."""
    out: dict[str, HostRoleInfo] = {}
    owner: dict[tuple[str, str], str] = {}
    for role in roles:
        if role.name in out:
            raise ValueError(f"two host roles named {role.name!r}")
        out[role.name] = role
        for part in role.parts:
            for facet in (("kind", part.kind), ("name", part.name)):
                # A role's component and its container share its kind (the plan's About of both).
                if owner.setdefault(facet, role.name) != role.name:
                    raise ValueError(f"host roles {owner[facet]!r} and {role.name!r} both have a part "
                                     f"{facet[0]} {facet[1]!r}")
    return out


HOST_ROLES: dict[str, HostRoleInfo] = registry(_ROLES)


def host_role(name: str) -> HostRoleInfo:
    try:
        return HOST_ROLES[name]
    except KeyError:
        raise KeyError(f"no host role {name!r}; one of {sorted(HOST_ROLES)}") from None


def reload_kinds(roles: dict[str, HostRoleInfo] | None = None) -> frozenset[str]:
    """The kinds of the roles' reload containers: renewing one is the role taking a configuration in place."""
    return frozenset(p.kind for r in (roles or HOST_ROLES).values() for p in r.parts
                     if p.config and p.resource == "container")


def role_of_kind(roles: dict[str, HostRoleInfo] | None = None) -> dict[str, str]:
    """Each host node kind → its role's name (a role's component has its container's kind)."""
    return {p.kind: r.name for r in (roles or HOST_ROLES).values() for p in r.parts}


def parts_of(roles: dict[str, HostRoleInfo] | None = None) -> dict[str, Part]:
    """Each host node kind → its part."""
    return {p.kind: p for r in (roles or HOST_ROLES).values() for p in r.parts}


def check_complete(table: str, keys: object, expected: set[str], others: frozenset[str] = frozenset()) -> None:
    """A review table keyed by host role kind or element must name every one the registry has (`expected`) and
    nothing else but its `others` (a pool's or a template's kinds): a role added without its row, or a row left for a
    kind renamed, is refused where the table is defined (at import), never skipped where it is read."""
    names = set(keys)  # type: ignore[call-overload]
    missing, unknown = sorted(expected - names), sorted(names - expected - others)
    if missing:
        raise LookupError(f"{table} has no entry for {', '.join(map(repr, missing))}: each host role's kinds and "
                          "elements (sandstack.spec.roles) need one")
    if unknown:
        raise LookupError(f"{table} has entries for {', '.join(map(repr, unknown))}, which no host role "
                          f"(sandstack.spec.roles) has; known: {', '.join(sorted(expected | others))}")
