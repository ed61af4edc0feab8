"""Why a resource changes: the spec changes whose declared effect (the change table) reaches it.

A field's effect is its base effect, except where one of its `when` conditions holds, where it is that
condition's effect instead (the table's "X; cond: Y"). Each condition is a named object
(sandstack.spec.changes.Condition); `DECIDE` below decides each one for a change from the resolved specs, and the
change matrix (tests/changes/test_change_matrix.py) sets each one up. A condition is decided on each side of the
change (before and after): the effects that apply are those of both sides, so a change that crosses a condition
keeps both. A reason names the condition that held for the resource (or the base effect), never the others.

A spec change is a reason for a resource when it concerns the resource (its host, pool or template, or a
shared layer that changed its template: `defaults`, a profile, a template it `extends`) and an applicable effect
reaches that kind of resource. A created or deleted resource is also explained by a placement change of its pool
and by its own pool, template or host entry added or removed; nothing else (a field added elsewhere in the spec
explains nothing here). Spec changes are read from the stacks as written (`ResolvedStack.written`): a value a
template inherits is the change of the layer that sets it, at that layer's path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

from sandstack.plan.network import has_resolver
from sandstack.spec import changes as table
from sandstack.spec.changes import Condition, Effect
from sandstack.spec.roles import HOST_ROLES, role_of_kind
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

    def describe(self) -> str: ...


@dataclass(frozen=True)
class Side:
    """One side of a change, as a condition sees it: the template concerned (None: none or not declared)."""

    template: ResolvedTemplate | None
    old: ResolvedTemplate | None  # the template before and after, for conditions about the change itself
    new: ResolvedTemplate | None
    change: FieldChange
    changed: frozenset[str]  # the resource's changed settings
    runtime: bool = False  # the resource's host runs the runtime service (before or after)
    ingress: bool = False  # the resource's host runs an ingress (before or after)


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


def _profile_names_kept(s: Side) -> bool:
    """The route kept and the same network profile names (the runtime's list of them) before and after."""
    return _route_kept(s) and s.old is not None and s.new is not None and \
        [n for n, _ in s.old.network_profiles] == [n for n, _ in s.new.network_profiles]


def _url_ports(t: ResolvedTemplate) -> set[int]:
    return {p.port for p in t.ports if p.exposure == "url"}


def _internal(t: ResolvedTemplate) -> bool:
    """A pool network is internal unless it publishes a port or egresses directly (sandstack.plan.network)."""
    return t.network.outbound != "direct" and not any(p.exposure in ("host", "public") for p in t.ports)


def _url_ports_change(s: Side) -> bool:
    return s.old is not None and s.new is not None and _url_ports(s.old) != _url_ports(s.new)


def _routing_changes(s: Side) -> bool:
    return s.old is not None and s.new is not None and _internal(s.old) != _internal(s.new)


def _setup_args(t: ResolvedTemplate) -> tuple[bool, bool]:
    """What its setup steps' build arguments name (sandstack.plan.snapshot.setup_build): the pool's gateway as their
    proxy, the pool's logging resolver for their lookups."""
    if not (t.setup and t.setup_policy is not None):
        return False, False
    return t.network.uses_gateway, has_resolver(t)


# Each declared `when` condition, decided for one side of a change, keyed by the condition object (tests/review
# checks that every condition the models declare is here).
DECIDE: dict[Condition, Callable[[Side], bool]] = {
    table.BUILTIN_TMPFS: _builtin_tmpfs_small,
    table.WRITABLE_ROOT: lambda s: s.template is not None and not s.template.read_only_root,
    table.DEVICES_REASSIGNED: lambda s: "gpu_device_ids" in s.changed,
    table.URL_PORTS: _url_port,
    table.URL_PORT: _url_port,
    table.NO_IDLE_TIMEOUT: lambda s: s.template is not None and s.template.lifecycle.idle_timeout == 0,
    table.PIDS_UNCHANGED: lambda s: s.old is not None and s.new is not None and s.old.limits.pids == s.new.limits.pids,
    table.DISK_WORKSPACE: lambda s: s.template is not None and any(w.type == "disk" for w in s.template.writable),
    table.NOTHING_INHERITED_CHANGES: lambda s: s.old is not None and s.old == s.new,
    table.URL_PORTS_CHANGE: _url_ports_change,
    table.ROUTING: _routing_changes,
    table.URL_AND_ROUTING: lambda s: _url_ports_change(s) and _routing_changes(s),
    table.ROUTE_KEPT: _route_kept,
    table.PROFILE_NAMES_KEPT: _profile_names_kept,
    table.IN_INGRESS_TLS: lambda s: ".ingress.tls." in s.change.path,
    table.UNLOGGED_ALLOW_ALL: _unlogged_allow_all,
    table.DIRECT_ROUTE: lambda s: s.template is not None and s.template.network.outbound == "direct",
    table.RUNTIME_HOST: lambda s: s.runtime,
    table.URL_PORTS_AND_RUNTIME: lambda s: s.runtime and _url_port(s),
    table.INGRESS_HOST: lambda s: s.ingress,
    table.SETUP_GATEWAY: lambda s: s.old is not None and s.new is not None and
    _setup_args(s.old) != _setup_args(s.new),
}

Held = tuple[Condition | None, Effect]  # the condition that held (None: none did) and the effect under it


def applicable(effect: Effect, sides: list[Side]) -> list[Held]:
    """The effects a change has on the objects of these sides, each with the condition that held: on each side,
    the first condition that holds there, else the base effect (None)."""
    out: list[Held] = []
    for side in sides:
        held: Held = next(((cond, under) for cond, under in effect.when if DECIDE[cond](side)), (None, effect))
        if held not in out:
            out.append(held)
    return out


@dataclass(frozen=True)
class Reason:
    """A spec change that explains a resource's action, with the effect that reached the resource: the condition
    that held for it (None: the field's base effect), never the branches that did not."""

    change: FieldChange
    held: tuple[Held, ...]

    @property
    def path(self) -> str:
        return self.change.path

    @property
    def old(self) -> Any:
        return self.change.old

    @property
    def new(self) -> Any:
        return self.change.new

    @property
    def label(self) -> str:
        """The change table's words for what reached the resource: `replace`, `url ports change: replace + guard +
        ingress` (two when a change crosses a condition, joined by '; ')."""
        return "; ".join(f"{cond.words}: {effect.head}" if cond else effect.head for cond, effect in self.held)

    def text(self) -> str:
        return f"{self.change.describe()} [{self.label}]"


# --- which effect reaches which kind of resource ---------------------------------------------------------

# The host role (sandstack.spec.roles) that renews each kind of host object.
ROLE_OF_KIND = role_of_kind()
# Containers on the infra image: every host role's container and a pool's run-once seeders (sandstack.plan.stack);
# a new infra image renews them.
POOL_SEEDERS = {"secrets seeder", "data loader"}
ON_INFRA = {p.kind for role in HOST_ROLES.values() for p in role.parts if p.resource == "container"} | POOL_SEEDERS
# A host role's reload container: what a change the role takes in place renews (sandstack.plan.reload).
RELOAD_KINDS = {p.kind for role in HOST_ROLES.values() for p in role.parts if p.config and p.resource == "container"}
# The components that hold other resources and no setting an effect reaches (their children change instead).
COMPONENT_KINDS = {"stack", "host", "template", "pool"}
# The host containers the change table's cascades replace (sandstack.spec.changes.CASCADES).
# (and their reload containers, which run again for the new container they name).
CASCADE_KINDS = {p.kind for c in table.CASCADES for r in c.renews for p in HOST_ROLES[r].parts
                 if p.resource == "container"}
# The runtime's reload container: what a change to an on-demand pool's recipe renews (sandstack.spec.changes.in_recipe).
RECIPE_KINDS = {p.kind for p in HOST_ROLES["runtime"].parts if p.config and p.resource == "container"}


def reaches(effect: Effect, r: Resource, action: str, changed: set[str], moved: bool = False) -> bool:
    """Whether this effect changes this resource (for a sandbox, a host-level effect only through its network:
    one it changes to, or its network replaced under it, `moved`; for a host container, a pool network of its host
    replaced, `moved`, reaches it through the change table's cascades)."""
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
    if moved and action == "replace" and kind in CASCADE_KINDS and (
            by_value or ROLE_OF_KIND[kind] in table.cascaded(roles | effect.restarts)):  # type: ignore[operator]
        return True  # the change table's cascade: a pool network on its host replaced under it
    if kind in COMPONENT_KINDS:
        return False
    if kind not in ROLE_OF_KIND:
        raise LookupError(f"resource kind {kind!r} is neither a host role's (sandstack.spec.roles) nor a pool's, "
                          "a template's or a component's")
    role = ROLE_OF_KIND[kind]
    if role in effect.renews or (action in ("create", "delete") and role in effect.host):
        return True  # renewed; or the role itself added or taken off (its objects made or removed, reload or not)
    if role in effect.reloads:
        return kind in RELOAD_KINDS  # the role takes it in place: only its reload container runs again
    return kind in ON_INFRA and infra


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
    profiles, a template others `extend`) only when it changed the resolved template of the resource (or of a pool
    on its host) and that template does not set the field itself."""
    head, _, rest = change.path.partition(".")
    key = rest.split(".", 1)[0]
    if head == "hosts":
        return key == r.host
    if head == "pools":
        # Computed only here: this runs for every (change, resource) pair of a diff, thousands of sandboxes each.
        return key == r.pool if r.pool else any(key in s.pools and r.host in s.pools[key].hosts for s in (old, new))
    templates = {r.template} if r.template else _templates_of_host(old, r.host) | _templates_of_host(new, r.host)
    if head == "templates":
        if key in templates:
            return True
        # A template others extend: the leaf as the child would set it (`templates.base.x.y` → `x.y`).
        leaf = rest.partition(".")[2]
        return bool(leaf) and any(_extends(old, new, t, key) and old.templates.get(t) != new.templates.get(t)
                                  and not _sets_itself(old, new, t, leaf) for t in templates)
    if head in ("defaults", "profiles"):
        # The leaf as a template would set it: `defaults.x.y` → `x.y`, `profiles.p.cpus` → `limits.cpus`.
        leaf = rest if head == "defaults" else "limits." + rest.partition(".")[2]
        return any(old.templates.get(t) != new.templates.get(t) and not _sets_itself(old, new, t, leaf)
                   for t in templates)
    return False


def _extends(old: ResolvedStack, new: ResolvedStack, template: str, ancestor: str) -> bool:
    """Whether `template` inherits from `ancestor` (through its `extends` chain) before or after the change."""
    for spec in (old, new):
        written, seen = spec.written.templates, {template}
        current = written[template].extends if template in written else None
        while current is not None and current not in seen and current in written:
            if current == ancestor:
                return True
            seen.add(current)
            current = written[current].extends
    return False


def _sets_itself(old: ResolvedStack, new: ResolvedStack, template: str, leaf: str) -> bool:
    """Whether the template, as written, sets this field itself before and after, so a shared layer's value never
    reaches it (a profile name where a block belongs sets none of the profile's fields)."""
    def sets(spec: ResolvedStack) -> bool:
        node: object = spec.written.templates.get(template)
        for name in leaf.split("."):
            if isinstance(node, dict):  # a map merged key by key (env): the template's own key wins
                if name not in node:
                    return False
                node = node[name]
            elif hasattr(node, "model_fields_set"):
                if name not in node.model_fields_set:  # type: ignore[union-attr]
                    return False
                node = getattr(node, name)
            elif isinstance(node, str):
                return False  # `limits: <profile>`: the profile's values reach the template
            else:
                return node is not None  # a list or a value, set whole above
        return True
    return sets(old) and sets(new)


def sides(change: FieldChange, r: Resource, old: ResolvedStack, new: ResolvedStack, changed: set[str]) -> list[Side]:
    """Each concerned template before and after the change (one template-less side when none is)."""
    out = []
    runtime = any(r.host in spec.hosts and spec.hosts[r.host].runtime is not None for spec in (old, new))
    ingress = any(r.host in spec.hosts and spec.hosts[r.host].ingress is not None for spec in (old, new))
    for name in sorted(concerned_templates(change, r, old, new)):
        a, b = old.templates.get(name), new.templates.get(name)
        out += [Side(t, a, b, change, frozenset(changed), runtime, ingress) for t in (a, b) if t is not None]
    return out or [Side(None, None, None, change, frozenset(changed), runtime, ingress)]


def own_entry(change: FieldChange, r: Resource) -> bool:
    """The resource's own pool, template or host entry, added or removed as a whole."""
    whole = change.old == "(declared)" or change.new == "(declared)"
    return whole and change.path in (f"pools.{r.pool}", f"templates.{r.template}", f"hosts.{r.host}")


def explain(change: FieldChange, r: Resource, action: str, changed: set[str], old: ResolvedStack,
            new: ResolvedStack, moved: bool = False) -> Reason | None:
    """This spec change as a reason for this resource's action, with the effect that reached it; None if it is
    not one."""
    if not concerns(change, r, old, new):
        return None
    if action in ("create", "delete") and (own_entry(change, r) or change.effect.scope == "placement"):
        return Reason(change, ((None, change.effect),))
    recipe = r.kind in RECIPE_KINDS and _ondemand(change, r, old, new)
    held = tuple(h for h in applicable(change.effect, sides(change, r, old, new, changed))
                 if reaches(h[1], r, action, changed, moved) or (recipe and table.in_recipe(h[1])))
    return Reason(change, held) if held else None


def _ondemand(change: FieldChange, r: Resource, old: ResolvedStack, new: ResolvedStack) -> bool:
    """Whether a template the change concerns is placed on the resource's host by a pool with on-demand places
    (a ceiling above its warm count), before or after: the runtime holds that pool's recipe."""
    templates = concerned_templates(change, r, old, new)
    return any(p.template in templates and r.host in p.hosts and p.places > p.replicas
               for spec in (old, new) for p in spec.pools.values())
