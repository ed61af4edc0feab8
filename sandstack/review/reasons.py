"""Why a resource changes: the spec changes whose declared effect (the change table) reaches it.

A field's effect is its base effect, except where one of its `when` conditions holds, where it is that
condition's effect instead (the table's "X; cond: Y"). The table states its conditions in words; the change
matrix (tests/changes/test_change_matrix.py) sets each one up, and `CONDITIONS` below decides each one for a
change from the resolved specs. A condition is decided on each side of the change (before and after): the
effects that apply are those of both sides, so a change that crosses a condition keeps both.

A spec change is a reason for a resource when it concerns the resource (its host, pool or template, or a
shared layer that changed its template) and an applicable effect reaches that kind of resource. A created or
deleted resource is also explained by a placement change of its pool and by its own pool, template or host
entry added or removed; nothing else (a field added elsewhere in the spec explains nothing here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

from sandstack.spec.changes import Effect
from sandstack.spec.resolve import ResolvedStack, ResolvedTemplate, scaled_builtin
from sandstack.spec.units import MIB

if TYPE_CHECKING:
    from sandstack.review.resources import Resource

UNDECLARED = "reason not declared in the change table"


class FieldChange(Protocol):
    """One changed spec field with its declared effect (sandstack.review.diff.FieldChange, which imports this
    module: named here so that the two do not import each other)."""

    path: str
    old: Any
    new: Any
    effect: Effect


@dataclass(frozen=True)
class Side:
    """One side of a change, as a condition sees it: the template concerned (None: none or not declared)."""

    template: ResolvedTemplate | None
    old: ResolvedTemplate | None  # the template before and after, for conditions about the change itself
    new: ResolvedTemplate | None
    change: FieldChange
    changed: frozenset[str]  # the resource's changed settings
    runtime: bool = False  # the resource's host runs the runtime service (before or after)


def _builtin_tmpfs_small(s: Side) -> bool:
    t = s.template
    if t is None or t.limits.memory >= 256 * MIB:
        return False
    return (t.writable == scaled_builtin("filesystem", "writable", t.limits.memory)
            or t.shm_size == scaled_builtin("filesystem", "shm_size", t.limits.memory))


def _url_port(s: Side) -> bool:
    return s.template is not None and any(p.exposure == "url" for p in s.template.ports)


def _unlogged_allow_all(s: Side) -> bool:
    return s.template is not None and s.template.network.egress == "allow-all" and not s.template.network.log


def _route_kept(s: Side) -> bool:
    """The pool's route out (none / gateway / direct) and its logging are the same before and after."""
    def route(t: ResolvedTemplate) -> tuple[str, bool]:
        return t.network.outbound, t.network.log
    return s.old is not None and s.new is not None and route(s.old) == route(s.new)


def _url_ports(t: ResolvedTemplate) -> set[int]:
    return {p.port for p in t.ports if p.exposure == "url"}


def _internal(t: ResolvedTemplate) -> bool:
    """A pool network is internal unless it publishes a port or egresses directly (sandstack.plan.network)."""
    return t.network.outbound != "direct" and not any(p.exposure in ("host", "public") for p in t.ports)


def _url_ports_change(s: Side) -> bool:
    return s.old is not None and s.new is not None and _url_ports(s.old) != _url_ports(s.new)


def _routing_changes(s: Side) -> bool:
    return s.old is not None and s.new is not None and _internal(s.old) != _internal(s.new)


# Each declared `when` condition, decided for one side of a change (tests/review checks that every condition
# the models declare is here).
CONDITIONS: dict[str, Callable[[Side], bool]] = {
    "built-in /tmp or /dev/shm under 256MiB": _builtin_tmpfs_small,
    "writable root": lambda s: s.template is not None and not s.template.read_only_root,
    "devices reassigned": lambda s: "gpu_device_ids" in s.changed,
    "url ports": _url_port,
    "a url port": _url_port,
    "no idle_timeout": lambda s: s.template is not None and s.template.lifecycle.idle_timeout == 0,
    "pids unchanged": lambda s: s.old is not None and s.new is not None and s.old.limits.pids == s.new.limits.pids,
    "a disk workspace": lambda s: s.template is not None and any(w.type == "disk" for w in s.template.writable),
    "nothing inherited changes": lambda s: s.old is not None and s.old == s.new,
    "url ports change": _url_ports_change,
    "the network turns internal or routed": _routing_changes,
    "url ports change, the network turns internal or routed": lambda s: _url_ports_change(s) and _routing_changes(s),
    "route and logging unchanged": _route_kept,
    "in the ingress's TLS": lambda s: ".ingress.tls." in s.change.path,
    "unlogged allow-all": _unlogged_allow_all,
    "a direct route": lambda s: s.template is not None and s.template.network.outbound == "direct",
    "a host with a runtime": lambda s: s.runtime,
}


def applicable(effect: Effect, sides: list[Side]) -> list[Effect]:
    """The effects a change has on the objects of these sides: on each side, the first condition's effect that
    holds there, else the base effect (a condition the review does not know may hold: both apply)."""
    out: list[Effect] = []

    def add(e: Effect) -> None:
        if e not in out:
            out.append(e)

    for side in sides:
        for condition, conditioned in effect.when:
            decide = CONDITIONS.get(condition)
            if decide is None:
                add(conditioned)
            elif decide(side):
                add(conditioned)
                break
        else:
            add(effect)
    return out


# --- which effect reaches which kind of resource ---------------------------------------------------------

# The host role (sandstack.spec.changes.HOST_ROLE_WORDS) that renews each kind of host object.
ROLE_OF_KIND = {
    "provider": "provider", "infra image": "infra", "guard": "guard", "guard state": "guard",
    "gateway": "gateway", "gateway log": "gateway", "network": "networks", "egress network": "networks",
    "ingress": "ingress", "ingress network": "ingress", "ingress data": "ingress",
    "runtime": "runtime", "runtime state": "runtime", "connection logger": "logger", "connection log": "logger",
}
# Containers on the infra image (components/sandbox_host.py, sandbox_pool.py): a new infra image renews them.
ON_INFRA = {"guard", "gateway", "ingress", "runtime", "connection logger", "secrets seeder", "data loader"}


def reaches(effect: Effect, r: Resource, action: str, changed: set[str], moved: bool = False) -> bool:
    """Whether this effect changes this resource (for a sandbox, a host-level effect only through its network:
    one it changes to, or its network replaced under it, `moved`)."""
    roles = effect.host
    if roles is not None and "provider" in roles:
        return True  # every object on the host follows its provider
    by_value = roles is None  # some host objects, as the value requires
    infra = by_value or (roles is not None and "infra" in roles)
    kind = r.kind
    if kind == "sandbox":
        if action in ("create", "delete"):
            return effect.sandboxes == "scale"
        return (effect.sandboxes in ("update", "replace") or effect.snapshot != "none" or effect.workspaces
                or ((by_value or "networks" in (roles or ())) and ("network" in changed or moved)))
    if kind in ("snapshot", "snapshot push"):
        return effect.snapshot != "none"
    if kind in ("secrets volume", "secrets seeder"):
        return effect.secrets or by_value or (kind == "secrets seeder" and infra)
    if kind in ("data volume", "data loader"):
        return effect.data or by_value or (kind == "data loader" and infra)
    if kind == "disk workspace":
        return effect.workspaces or by_value
    if by_value:
        return True
    return ROLE_OF_KIND.get(kind) in roles or (kind in ON_INFRA and infra)  # type: ignore[operator]


# --- which spec changes concern which resource ----------------------------------------------------------

def _templates_of_host(spec: ResolvedStack, host: str | None) -> set[str]:
    return {p.template for p in spec.pools.values() if host in p.hosts}


def concerned_templates(change: FieldChange, r: Resource, old: ResolvedStack, new: ResolvedStack) -> set[str]:
    """The templates a change concerns for this resource: its own, else those the change names on its host."""
    if r.template:
        return {r.template}
    head, _, rest = change.path.partition(".")
    key = rest.split(".", 1)[0]
    if head == "templates":
        return {key}
    if head == "pools":
        return {s.pools[key].template for s in (old, new) if key in s.pools}
    return _templates_of_host(old, r.host) | _templates_of_host(new, r.host)


def concerns(change: FieldChange, r: Resource, old: ResolvedStack, new: ResolvedStack) -> bool:
    """Whether a spec change is about this resource's host, pool or template; a shared layer (defaults,
    profiles) only when it changed the resolved template of the resource (or of a pool on its host)."""
    head, _, rest = change.path.partition(".")
    key = rest.split(".", 1)[0]
    if head == "hosts":
        return key == r.host
    if head == "pools":
        # Computed only here: this runs for every (change, resource) pair of a diff, thousands of sandboxes each.
        return key == r.pool if r.pool else any(key in s.pools and r.host in s.pools[key].hosts for s in (old, new))
    templates = {r.template} if r.template else _templates_of_host(old, r.host) | _templates_of_host(new, r.host)
    if head == "templates":
        return key in templates
    if head in ("defaults", "profiles"):
        # The leaf as a template would set it: `defaults.x.y` → `x.y`, `profiles.p.cpus` → `limits.cpus`.
        leaf = rest if head == "defaults" else "limits." + rest.partition(".")[2]
        return any(old.templates.get(t) != new.templates.get(t) and not _sets_itself(old, new, t, leaf)
                   for t in templates)
    return False


def _sets_itself(old: ResolvedStack, new: ResolvedStack, template: str, leaf: str) -> bool:
    """Whether the template sets this field itself before and after, so a shared layer's value never reaches it."""
    def sets(spec: ResolvedStack) -> bool:
        node: object = spec.spec.templates.get(template)
        for name in leaf.split("."):
            if isinstance(node, dict):  # a map merged key by key (env): the template's own key wins
                if name not in node:
                    return False
                node = node[name]
            elif hasattr(node, "model_fields_set"):
                if name not in node.model_fields_set:  # type: ignore[union-attr]
                    return False
                node = getattr(node, name)
            else:
                return node is not None  # a list or a value, set whole above
        return True
    return sets(old) and sets(new)


def sides(change: FieldChange, r: Resource, old: ResolvedStack, new: ResolvedStack, changed: set[str]) -> list[Side]:
    """Each concerned template before and after the change (one template-less side when none is)."""
    out = []
    runtime = any(r.host in spec.hosts and spec.hosts[r.host].runtime is not None for spec in (old, new))
    for name in sorted(concerned_templates(change, r, old, new)):
        a, b = old.templates.get(name), new.templates.get(name)
        out += [Side(t, a, b, change, frozenset(changed), runtime) for t in (a, b) if t is not None]
    return out or [Side(None, None, None, change, frozenset(changed), runtime)]


def own_entry(change: FieldChange, r: Resource) -> bool:
    """The resource's own pool, template or host entry, added or removed as a whole."""
    whole = change.old == "(declared)" or change.new == "(declared)"
    return whole and change.path in (f"pools.{r.pool}", f"templates.{r.template}", f"hosts.{r.host}")


def explains(change: FieldChange, r: Resource, action: str, changed: set[str], old: ResolvedStack,
             new: ResolvedStack, moved: bool = False) -> bool:
    """Whether this spec change is a reason for this resource's action."""
    if not concerns(change, r, old, new):
        return False
    if action in ("create", "delete") and (own_entry(change, r) or change.effect.scope == "placement"):
        return True
    effects = applicable(change.effect, sides(change, r, old, new, changed))
    return any(reaches(e, r, action, changed, moved) for e in effects)
