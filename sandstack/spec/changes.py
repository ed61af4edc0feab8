"""What changing a spec field does on the next `pulumi up`: the one change table.

Every model field declares its effect once, beside the field (`field(..., change=...)`), either by a
preset name or as an `Effect`. That declaration is the only one: the JSON Schema carries its label
(`x-change`), the README reference's Change column is generated from it, the sandbox containers'
`replace_on_changes` is the union of the container settings the declared fields force
(`Effect.forces`, see `sandstack.plan.changes`), the diff explains a replacement with it, and the
change-matrix test (tests/changes/test_change_matrix.py) applies each field's change and asserts that
exactly the declared resources change.

An effect names what it does to each kind of object sandstack manages: the sandbox containers of the
pools the field belongs to, their snapshot image, their secrets volume, and the host's own objects, by
role (`HostRole`, one descriptor each in sandstack.spec.roles): always an explicit set, never "some of them", so
the reference, the diff and the matrix say which. A role the host does not have (no ingress declared, no gateway
pool) is not renewed.
A field whose effect depends on another setting says so in `when`: a named `Condition` below (each one a
matrix case), which the review decides for a change (sandstack.review.reasons.DECIDE, keyed by the object) and
names when it held. A block (a field holding other fields) declares the union of its fields' effects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sandstack.spec.roles import HOST_ROLES

# Host objects a field may renew, as the reference and the diff name them: one descriptor per role
# (sandstack.spec.roles), whose name an Effect's `host` holds.
HostRole = str  # a name of sandstack.spec.roles.HOST_ROLES
HOST_ROLE_WORDS: dict[str, str] = {name: role.words for name, role in HOST_ROLES.items()}


@dataclass(frozen=True)
class Cascade:
    """Pulumi's dependent rule, as data: when a change replaces `role`'s objects delete-before-replace (a pool network
    has a fixed name, so the old one goes first), the engine also replaces the containers of the roles in `renews`
    that join them by name (a ForceNew input, `networks_advanced`), whatever the changed field declares. The
    reference's legend and the diff's reasons read it; the change matrix expects it."""

    role: str  # the HostRole whose replaced objects others refer to
    renews: frozenset[str]  # the HostRoles whose containers are replaced with them
    words: str

    def __post_init__(self) -> None:
        unknown = sorted(({self.role} | self.renews) - set(HOST_ROLES))
        if unknown:
            raise ValueError(f"a Cascade names host roles {unknown}; one of {sorted(HOST_ROLES)}")


CASCADES: tuple[Cascade, ...] = (
    Cascade("networks", frozenset({"gateway", "ingress"}),
            "a replaced pool network also replaces the gateway and ingress containers that join it (Pulumi replaces "
            "what refers to a resource it deletes before replacing)"),
)


def cascaded(roles: frozenset[str] | set[str]) -> frozenset[str]:
    """The roles whose containers a replacement of these roles' objects also replaces."""
    return frozenset(r for c in CASCADES if c.role in roles for r in c.renews)


@dataclass(frozen=True, eq=False)
class Condition:
    """A setting under which a field's change has another effect (the table's "X; cond: Y"). Compared by
    identity: the review and the change matrix name the object, never its words."""

    words: str  # as the reference's Change column and the diff's reasons print it

    def __repr__(self) -> str:
        return f"Condition({self.words!r})"

    def __str__(self) -> str:
        return self.words


# The tables' conditions, one object each (the models name them in `when`).
BUILTIN_TMPFS = Condition("built-in /tmp or /dev/shm under 256MiB")
WRITABLE_ROOT = Condition("writable root")
DEVICES_REASSIGNED = Condition("devices reassigned")
# The host has url ports (a pool on it with an `exposure: url` port) / this port is one.
URL_PORTS = Condition("url ports")
URL_PORT = Condition("a url port")
NO_IDLE_TIMEOUT = Condition("no idle_timeout")
PIDS_UNCHANGED = Condition("pids unchanged")
DISK_WORKSPACE = Condition("a disk workspace")
NOTHING_INHERITED_CHANGES = Condition("nothing inherited changes")
# A url port is a site in the host's ingress (its Caddyfile), an env var of the sandbox, and a guard rule.
URL_PORTS_CHANGE = Condition("url ports change")
# A pool's network is internal unless the pool publishes a port ('host' or 'public') or egresses directly: its first
# published port, or its last one gone, turns the network routed or internal (the bridge's kind is in the guard's
# rules).
ROUTING = Condition("the network turns internal or routed")
URL_AND_ROUTING = Condition("url ports change, the network turns internal or routed")
# The pool's route out (none / gateway / direct) and whether it is logged are the same before and after: a value
# that means what the default already meant (`log: true` on 'allow-all', `protocols: http`).
ROUTE_KEPT = Condition("route and logging unchanged")
# A template's network profiles edited with the same names (and so the same runtime configuration) and the same route.
PROFILE_NAMES_KEPT = Condition("route and profile names unchanged")
UNLOGGED_ALLOW_ALL = Condition("unlogged allow-all")
# Unlogged allow-all or `protocols: any`: no gateway on the way out, so the guard's rules alone refuse destinations.
DIRECT_ROUTE = Condition("a direct route")
# TlsSecretRef serves the Docker endpoint's TLS (the provider holds it) and the ingress's certificate (the ingress
# container holds it): which one renews depends on where the reference sits.
IN_INGRESS_TLS = Condition("in the ingress's TLS")
RUNTIME_HOST = Condition("a host with a runtime")
# Both of the above: a count of a pool's sandboxes is in the ingress's sites and the runtime's list of the pool's.
URL_PORTS_AND_RUNTIME = Condition("url ports and a runtime")
# An ingress beside a runtime wakes sites through it: its network's fixed subnet is there because of the runtime, it
# mounts the runtime's configuration volume (the runtime's socket), and its wake token derives from the runtime's.
INGRESS_HOST = Condition("a host with an ingress")
# A template's setup steps run on its pool's network, with the pool's gateway as their proxy and its logging resolver
# for their lookups where it has them (docs/design/setup-policy.md): a change that gives or takes either changes the
# build's arguments, which rebuilds the snapshot image.
SETUP_GATEWAY = Condition("setup steps, their gateway or resolver given or taken")


def in_recipe(effect: "Effect") -> bool:
    """Whether a change reaches the on-demand recipe of a pool's places (the container the runtime creates at claim,
    in its configuration: sandstack.plan.ondemand): what updates or replaces the pool's sandboxes, or moves them to
    another image, changes the places not made yet alike, so on a pool with on-demand places it also reloads the
    runtime (the table's rows name the sandboxes; this consequence is the same for each of them)."""
    return effect.sandboxes in ("update", "replace") or effect.snapshot != "none"


@dataclass(frozen=True)
class Effect:
    """What a change of one field does to the objects of the pools it concerns (`scope`)."""

    sandboxes: Literal["none", "update", "replace", "scale"] = "none"  # scale: sandboxes created or deleted
    snapshot: Literal["none", "rebuild", "switch"] = "none"  # switch: the pool moves to another image
    secrets: bool = False  # the secrets volume is re-seeded (its seeder runs again)
    data: bool = False  # the pool's read-only data volumes are reloaded (their seeder runs again)
    workspaces: bool = False  # the pool's disk workspaces are made anew, empty: what was written there is lost
    # The host roles whose configuration or container the field changes (HostRole), where the host has them: a role
    # that takes its configuration in place (sandstack.spec.roles, `reload`) is reloaded, any other renewed.
    host: frozenset[str] = frozenset()
    # Roles that take their configuration in place, renewed all the same: the field changes their container's inputs.
    restarts: frozenset[str] = frozenset()
    scope: Literal["pools", "host", "gpu", "placement"] = "pools"
    when: tuple[tuple[Condition, Effect], ...] = ()  # (condition, the effect under it)
    forces: tuple[str, ...] = ()  # sandbox container settings this field feeds that only a replace applies
    label_text: str = ""  # the Change column's word, for the presets

    def __post_init__(self) -> None:
        if not isinstance(self.host, frozenset) or not self.host <= set(HOST_ROLE_WORDS):
            raise ValueError(f"an Effect's host is a frozenset of {sorted(HOST_ROLE_WORDS)}, not {self.host!r}")
        if not isinstance(self.restarts, frozenset) or not self.restarts <= {
                r for r in self.host if HOST_ROLES[r].reload == "in place"}:
            raise ValueError(f"an Effect's restarts are roles of its host that reload in place, not {self.restarts!r}")
        if not all(isinstance(cond, Condition) for cond, _ in self.when):
            raise ValueError(f"an Effect's conditions are sandstack.spec.changes.Condition objects: {self.when!r}")

    @property
    def renews(self) -> frozenset[str]:
        """The host roles whose containers (and every object of theirs) this change replaces."""
        return frozenset(r for r in self.host if HOST_ROLES[r].reload == "restart") | self.restarts

    @property
    def reloads(self) -> frozenset[str]:
        """The host roles that take this change in place: only their reload container is replaced."""
        return self.host - self.renews

    @property
    def label(self) -> str:
        """The Change column: the effect's own words (`head`), then each condition's."""
        return self.head + "".join(f"; {cond.words}: {effect.label}" for cond, effect in self.when)

    @property
    def head(self) -> str:
        """The effect itself, without its conditions: the preset word, or its parts joined by '+'."""
        if self.label_text:
            base = self.label_text
        else:
            parts = [part for part in (
                {"update": "in-place", "replace": "replace", "scale": "scale"}.get(self.sandboxes),
                {"rebuild": "rebuild", "switch": "switch"}.get(self.snapshot),
                "reseed" if self.secrets else None,
                "reload" if self.data else None,
                "new workspaces" if self.workspaces else None,
                *sorted(self.renews),
                *(f"reload {role}" for role in sorted(self.reloads)),
            ) if part]
            if self.scope == "host":
                parts.append("all pools")
            if self.scope == "gpu":
                parts.append("gpu pools")
            base = " + ".join(parts) or "none"
        return base

    def under(self, condition: Condition | None) -> Effect:
        if condition is None:
            return self
        for cond, effect in self.when:
            if cond is condition:
                return effect
        raise KeyError(f"no condition {condition!r} in {self.label!r}")


NONE = Effect(label_text="none")
IN_PLACE = Effect(sandboxes="update", label_text="in-place")
REPLACE = Effect(sandboxes="replace", label_text="replace")
REBUILD = Effect(sandboxes="replace", snapshot="rebuild", label_text="rebuild")
RESEED = Effect(secrets=True, label_text="reseed")
RELOAD = Effect(data=True, label_text="reload")
# The provider's own inputs (endpoint, TLS, ssh options): every object on the host follows the provider.
PROVIDER = Effect(host=frozenset({"provider"}))
GUARD = Effect(host=frozenset({"guard"}))  # the guard holds the value (pids.max, lifecycle lines)
# A block of limits: the guard holds each sandbox's pids limit, so it is renewed when that limit changes.
REPLACE_AND_GUARD = Effect(sandboxes="replace", host=frozenset({"guard"}), when=((PIDS_UNCHANGED, REPLACE),))
IN_PLACE_AND_GUARD = Effect(sandboxes="update", host=frozenset({"guard"}))
PRESETS: dict[str, Effect] = {e.label_text: e for e in (NONE, IN_PLACE, REPLACE, REBUILD, RESEED, RELOAD)}

# The Change column's legend (README reference).
MEANING: dict[str, str] = {
    "none": "validation and placement only; changes no resource by itself",
    "in-place": "updates the pool's running sandboxes without replacing them",
    "replace": "replaces the pool's sandbox containers",
    "rebuild": "rebuilds the template's snapshot image; the pool's sandboxes are replaced onto it",
    "reseed": "re-seeds the pool's secrets volume; running sandboxes read the new files, none is replaced",
    "reload": "reloads the pool's read-only data volumes; running sandboxes read the new files, none is replaced",
    "new workspaces": "makes the pool's disk workspaces anew (empty, or seeded from the image): the data written "
                      "there is lost",
    "scale": "creates or deletes sandboxes; the others keep running",
    "placement": "creates the pool's objects on hosts added to it (renewing their guard, gateway, logger, ingress "
                 "and runtime as the pool needs), deletes them from hosts removed; nothing changes on the hosts it "
                 "keeps",
    "switch": "the pool moves to another template's snapshot image; an image no pool uses is deleted",
    **{role: f"also renews {words}" + "".join(f"; {c.words}" for c in CASCADES if c.role == role)
       for role, words in HOST_ROLE_WORDS.items()},
    **{f"reload {name}": f"the {name} takes its new configuration in place: it {role.reload_words} (its reload "
                         "container is run again; nothing it serves is interrupted)"
       for name, role in HOST_ROLES.items() if role.reload == "in place"},
    "all pools": "for every pool on the host, not only the field's own",
    "gpu pools": "for the host's pools that request GPUs (their device ids move)",
    "X; cond: Y": "X, except under the condition, where Y",
}


def effect_of(change: str | Effect) -> Effect:
    if isinstance(change, Effect):
        return change
    try:
        return PRESETS[change]
    except KeyError:
        raise ValueError(f"unknown change effect {change!r}; one of {sorted(PRESETS)} or an Effect") from None
