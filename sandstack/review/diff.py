"""`sandstack diff BASE HEAD`: what `pulumi up` would do going from one spec to the other, and why.

Both specs become their resource lists (sandstack.review.resources, from the plan the components
register). A resource only in HEAD is created, only in BASE deleted; one in both with changed settings is
replaced unless every changed setting is one the provider updates in place (sandstack.plan.changes), and
its reasons are the changed spec fields whose declared effect (the change table) reaches that kind of
resource, in the table's words (sandstack.review.reasons decides which effect applies and what it reaches;
a change no declared effect explains says so). The security summary (sandstack.review.security) comes first.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from sandstack.plan.changes import UPDATED_IN_PLACE
from sandstack.plan.snapshot import build_inputs
from sandstack.plan.stack import StackPlan, plan_stack
from sandstack.review import show
from sandstack.review.actions import planned_actions
from sandstack.review.capacity import Capacity, CapacityChange, capacity as reserved, compare_capacity
from sandstack.review.cost import Cost
from sandstack.review.origin import with_origin
from sandstack.review.reasons import Reason, explain
from sandstack.review.resources import Resource, stack_resources
from sandstack.review.security import Finding, compare
from sandstack.spec.changes import Effect
from sandstack.spec.models import Stack
from sandstack.spec.models.base import change_of
from sandstack.spec.resolve import ResolvedStack, ResolvedTemplate
from sandstack.spec.roles import HOST_ROLES, PACKAGE, reload_kinds
from sandstack.spec.walk import model_fields

# A host role's reload container: its replacement is the role taking a configuration in place.
RELOAD_KINDS = reload_kinds()

# Settings shown for a reviewer that are not inputs of their own (each reaches Docker through another one).
# public_urls: the plan's record of which url ports are public; no container input. logged_pools: whose
# connections the logger logs, which the guard's NFLOG rules decide, not the logger's inputs.
INFORMATIVE = {"egress", "lifecycle", "secret_files", "replace_on_changes", "pids", "data", "urls", "public_urls",
               "logged_pools"}
# Per kind of resource: a volume's mount path and user are its sandbox's inputs, not the volume's.
# The connection logger shows what it serves, which is its configuration (its reload container's inputs).
INFORMATIVE_OF = {"sandbox": INFORMATIVE, "disk workspace": {"path", "sandbox"}, "data volume": {"path"},
                  HOST_ROLES["logger"].part("container").kind: {"logged_pools", "resolvers", "upstream"},
                  HOST_ROLES["logger"].part("container", config=True).kind: {"logged_pools"},
                  # So does the ingress: its sites and their domain are its Caddyfile.
                  HOST_ROLES["ingress"].part("container").kind: {"sites", "domain"},
                  # And the runtime: its pools and what each token scope acts on are its configuration set.
                  HOST_ROLES["runtime"].part("container").kind: {"pools", "token_pools"},
                  # A snapshot's setup policy is judged at build time, not a build input (docs/design/setup-policy.md):
                  # where the build runs is, and the engine's action shows it.
                  "snapshot": {"setup_egress"}}
COMPONENT_TYPE = PACKAGE


@dataclass(frozen=True)
class FieldChange:
    path: str  # concrete spec path, e.g. templates.coder.limits.cpus
    old: Any
    new: Any
    effect: Effect
    # Where an unset side's value comes from (sandstack.review.origin): (value, `profiles.medium.memory`).
    inherited: tuple[tuple[Any, str] | None, tuple[Any, str] | None] = (None, None)

    def describe(self) -> str:
        if "(declared)" in (self.old, self.new):
            return f"{self.path} {'added' if self.old is None else 'removed'}"
        text = describe(self.path, self.old, self.new)
        key = self.path
        for side, found in zip((self.old, self.new), self.inherited):
            if side is None and found is not None:
                # The unset side shows the value it resolved to and the layer that set it.
                text = text.replace("(unset)", f"(inherited {_show(found[0], key)} from {found[1]})", 1)
        return text

    def text(self) -> str:
        return f"{self.describe()} [{self.effect.label}]"


@dataclass
class ResourceChange:
    resource: Resource
    action: str  # create, update, replace, delete
    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    reasons: list[Reason] = field(default_factory=list)
    # Resources renewed in the same change that this one's changed inputs refer to: the engine's reason when no
    # spec field's declared effect reaches it (Pulumi replaces what depends on a resource replaced delete-first).
    renewed_with: tuple[str, ...] = ()

    @property
    def reload(self) -> bool:
        """A host role's reload container run again: the role takes a new configuration in place (for the engine
        a replacement of that container; nothing the role serves is interrupted)."""
        return self.action == "replace" and self.resource.kind in RELOAD_KINDS

    @property
    def shown(self) -> str:
        """What a reviewer is told happens: the engine's action, or `reload`."""
        return "reload" if self.reload else self.action

    def to_json(self) -> dict:
        r = self.resource
        return {"name": r.name, "type": r.type, "kind": r.kind, "host": r.host, "pool": r.pool,
                "template": r.template, "action": self.action, "reload": self.reload,
                "changed": {k: {"old": o, "new": n} for k, (o, n) in sorted(self.changed.items())},
                "reasons": [{"path": c.path, "old": c.old, "new": c.new, "effect": c.label}
                            for c in self.reasons],
                "renewed_with": list(self.renewed_with)}


@dataclass
class SnapshotChange:
    host: str
    template: str
    why: list[str]
    unbumped: bool  # setup, files or base image changed without a version bump


@dataclass
class Diff:
    security: list[Finding]
    changes: list[ResourceChange]
    snapshots: list[SnapshotChange]
    fields: list[FieldChange] = field(default_factory=list)  # the spec changes, each with its declared effect
    # Each spec change's pools (a template's, a host's, every pool for `defaults` or a profile): what a security
    # finding of a pool is accepted through (sandstack.review.categories).
    field_pools: dict[str, tuple[str, ...]] = field(default_factory=dict)
    unchanged: int = 0  # resources (not components) in HEAD that `pulumi up` leaves as they are
    capacity: list[CapacityChange] = field(default_factory=list)  # per pool, resolved: numbers and names only
    # What the pools reserve of the hosts before → after, per pool, host and the stack (sandstack.review.capacity).
    reserved: Capacity | None = None
    # The monthly figure before → after, only where a price list is given (sandstack.review.cost).
    cost: Cost | None = None
    # The two plans compared (base, head): the markdown's diagram reads their nodes' references.
    plans: tuple[StackPlan, StackPlan] | None = field(default=None, repr=False, compare=False)

    def counts(self) -> dict[str, int]:
        """Resources by what a reviewer is told happens (`reload`: a reload container the engine replaces)."""
        out = {"create": 0, "update": 0, "replace": 0, "reload": 0, "delete": 0}
        for c in self.changes:
            if not c.resource.type.startswith(COMPONENT_TYPE):
                out[c.shown] += 1
        return out

    def loosens(self) -> bool:
        return any(f.loosens for f in self.security)

    def replaces(self) -> bool:
        return any(c.action in ("replace", "delete") and not c.resource.type.startswith(COMPONENT_TYPE)
                   for c in self.changes)


def describe(key: str, old: Any, new: Any, limit: int = 6) -> str:
    """One changed setting in words: entries added and removed for lists and maps, else old → new."""
    if isinstance(old, dict) and isinstance(new, dict):
        parts = [f"+{k}={_show(new[k], k)}" for k in new if k not in old]
        parts += [f"-{k}" for k in old if k not in new]
        for k in new:
            if k not in old or old[k] == new[k]:
                continue
            if _strings(old[k]) and _strings(new[k]):  # a list in a map (a resolver's options): entries added, removed
                parts += [f"{k}: +{_show(v, key)}" for v in new[k] if v not in old[k]]
                parts += [f"{k}: -{_show(v, key)}" for v in old[k] if v not in new[k]]
            else:
                parts.append(f"{k}: {_show(old[k], k)} → {_show(new[k], k)}")
    elif isinstance(old, str) and isinstance(new, str) and "\n" in old + new:
        a, b = old.splitlines(), new.splitlines()
        parts = [f"+{_show(v, key)}" for v in b if v not in a] + [f"-{_show(v, key)}" for v in a if v not in b]
    elif isinstance(old, list) and isinstance(new, list) and all(isinstance(v, str) for v in old + new):
        parts = [f"+{_show(v, key)}" for v in new if v not in old] + [f"-{_show(v, key)}" for v in old if v not in new]
        if not parts:
            parts = ["order changed"]
    else:
        return f"{key}: {_show(old, key)} → {_show(new, key)}"
    more = f" … and {len(parts) - limit} more" if len(parts) > limit else ""
    return f"{key}: " + "; ".join(parts[:limit]) + more


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _show(value: Any, key: str = "") -> str:
    return show.value(key, value)


# --- spec field changes, with their declared effects ------------------------------------------------------

@cache
def _patterns() -> list[tuple[re.Pattern, Effect]]:
    out = []
    for path, info in model_fields(Stack).items():
        pattern = re.escape(path).replace(r"\*", r"[^.]+").replace(r"\[\]", r"\.[0-9]+")
        out.append((re.compile(f"^{pattern}$"), change_of(info)))
    return out


def effect_at(path: str) -> Effect | None:
    for pattern, effect in _patterns():
        if pattern.match(path):
            return effect
    return None


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    """Leaves by concrete path; a list of scalars (an allow list, a command) is one leaf."""
    if isinstance(value, dict) and value and not (set(value) == {"secret"}):
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else k, out)
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        for i, v in enumerate(value):
            _flatten(v, f"{prefix}.{i}", out)
    else:
        out[prefix] = value


ENTRY_MAPS = ("hosts", "profiles", "templates", "pools")  # a whole entry added or removed is one change


def field_changes(old: Stack, new: Stack) -> list[FieldChange]:
    raw_a, raw_b = old.model_dump(mode="json", exclude_unset=True), new.model_dump(mode="json", exclude_unset=True)
    out, whole = [], set()
    for block in ENTRY_MAPS:
        keys_a, keys_b = set(raw_a.get(block) or {}), set(raw_b.get(block) or {})
        for key in sorted(keys_a ^ keys_b):
            whole.add(f"{block}.{key}")
            # A pool added or removed is placed on, or taken off, each of its hosts.
            effect = effect_at("pools.*.hosts") if block == "pools" else _effect_of_leaf(block)
            out.append(FieldChange(f"{block}.{key}", "(declared)" if key in keys_a else None,
                                   "(declared)" if key in keys_b else None, effect))
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    _flatten(raw_a, "", a)
    _flatten(raw_b, "", b)
    blocks = set()
    for path in sorted(set(a) | set(b)):
        if a.get(path) == b.get(path) or ".".join(path.split(".")[:2]) in whole:
            continue
        # A block of an entry set on one side only (an ingress added, a security block removed) is one change,
        # with the block's own declared effect, not one per field in it.
        block = _absent(raw_a, path) or _absent(raw_b, path)
        if block and block.count(".") >= 2 and block.split(".")[0] in ENTRY_MAPS:
            if block not in blocks:
                blocks.add(block)
                out.append(FieldChange(block, _at(raw_a, block), _at(raw_b, block), _effect_of_leaf(block)))
            continue
        out.append(FieldChange(path, a.get(path), b.get(path), _effect_of_leaf(path)))
    return sorted(out, key=lambda c: c.path)


def _at(raw: Any, path: str) -> Any:
    for key in path.split("."):
        if isinstance(raw, list) and key.isdigit() and int(key) < len(raw):
            raw = raw[int(key)]
        elif isinstance(raw, dict) and key in raw:
            raw = raw[key]
        else:
            return None
    return raw


def _absent(raw: Any, path: str) -> str | None:
    """The shortest prefix of `path` that `raw` does not have (None: it has the whole path)."""
    keys = path.split(".")
    for i in range(1, len(keys) + 1):
        if _at(raw, ".".join(keys[:i])) is None:
            return ".".join(keys[:i])
    return None


def _digests(t: ResolvedTemplate) -> tuple[dict[str, str], dict[str, str]]:
    """A template's snapshot files and data files by where they land → the start of their sha256."""
    files = {f["path"]: f"sha256 {f['sha256'][:12]}" for f in build_inputs(t)["files"]}  # type: ignore[union-attr]
    data = {f"{m.path}/{rel}": f"sha256 {hashlib.sha256(src.read_bytes()).hexdigest()[:12]}"
            for m in t.data for rel, src in m.files}
    return files, data


def content_changes(old: ResolvedStack, new: ResolvedStack) -> list[FieldChange]:
    """Files next to the stack whose content changed while the spec naming them did not: a change of the
    field that names them (`snapshot.files`, `data`), with that field's declared effect."""
    out = []
    for name in sorted(set(old.templates) & set(new.templates)):
        for path, (a, b) in zip(("snapshot.files", "data"), zip(_digests(old.templates[name]),
                                                                  _digests(new.templates[name]))):
            before = {k: v for k, v in a.items() if k in b and b[k] != v}
            if before:
                field_path = f"templates.{name}.{path}"
                out.append(FieldChange(field_path, before, {k: b[k] for k in before}, _effect_of_leaf(field_path)))
    return out


def _effect_of_leaf(path: str) -> Effect:
    """The declared effect of the field at `path`, or of the nearest declared field above it (a map entry)."""
    parts = path.split(".")
    while parts:
        effect = effect_at(".".join(parts))
        if effect is not None:
            return effect
        parts.pop()
    raise KeyError(path)


# --- resources --------------------------------------------------------------------------------------------

def _action(r: Resource, changed: dict[str, tuple[Any, Any]]) -> str:
    if r.kind == "provider":
        return "update"
    settings = set(changed) - INFORMATIVE_OF.get(r.kind, set())
    if not settings:
        return "update"
    if r.type.endswith("/container:Container") and settings <= UPDATED_IN_PLACE:
        return "update"
    return "replace"


def _renewed_names(act, plan) -> tuple[str, ...]:
    return tuple(plan.nodes[k].name if k in plan.nodes else k.split("::", 1)[1] for k in act.renewed)


def _inputs_changed(act, plan) -> dict[str, tuple[Any, Any]]:
    """The inputs the engine sees changed, by name: a renewed resource it refers to is named, any other input's
    value is not shown (it may carry what the reviewer's settings redact)."""
    renewed = _renewed_names(act, plan)
    after = f"(unknown until {', '.join(renewed)} is renewed)" if renewed else "(changed)"
    return {f"input {name}": ("(as before)", after) for name in act.changed}


def _snapshot_changes(old: ResolvedStack, new: ResolvedStack, changes: list[ResourceChange]) -> list[SnapshotChange]:
    out = []
    for c in changes:
        if c.resource.kind != "snapshot" or c.action != "replace":
            continue
        t = c.resource.template
        a, b = build_inputs(old.templates[t]), build_inputs(new.templates[t])
        why = []
        if a["version"] != b["version"]:
            why.append(f"version {a['version'] or '(none)'} → {b['version'] or '(none)'}")
        if a["setup"] != b["setup"]:
            why.append("setup changed")
        if a["files"] != b["files"]:
            why.append("files changed")
        if a["base_image"] != b["base_image"]:
            why.append(f"base image {a['base_image']} → {b['base_image']}")
        if a.get("platform") != b.get("platform"):
            why.append(f"platform {a.get('platform') or '(the host’s own)'} → {b.get('platform') or '(the host’s own)'}")
        if a["supervisor"] != b["supervisor"] or a["format"] != b["format"]:
            why.append("sandstack's supervisor or build format changed")
        unbumped = a["version"] == b["version"] and any(w in why for w in ("setup changed", "files changed")) \
            or (a["version"] == b["version"] and a["base_image"] != b["base_image"])
        out.append(SnapshotChange(c.resource.host or "", t or "", why, unbumped))
    return out


def diff(old: ResolvedStack, new: ResolvedStack, stack: str) -> Diff:
    plans = plan_stack(old, stack), plan_stack(new, stack)
    engine = planned_actions(*plans)
    before = {r.name: r for r in stack_resources(old, stack, plan=plans[0])}
    after = {r.name: r for r in stack_resources(new, stack, plan=plans[1])}
    # The stacks as written: a value a template inherits changes at the layer that sets it (defaults, extends).
    fields = sorted((with_origin(f, old, new) for f in field_changes(old.written, new.written)),
                    key=lambda c: c.path)
    fields = sorted(fields + content_changes(old, new), key=lambda c: c.path)
    changes: list[ResourceChange] = []
    for name in list(after) + [n for n in before if n not in after]:
        a, b = before.get(name), after.get(name)
        r = b or a
        assert r is not None
        if a is None:
            change = ResourceChange(r, "create")
        elif b is None:
            change = ResourceChange(r, "delete")
        else:
            # A reload's configuration digest differs with every change of what it shows (and per host): the
            # settings say what changed, and alike hosts still read alike.
            changed = {k: (a.props.get(k), b.props.get(k)) for k in set(a.props) | set(b.props)
                       if a.props.get(k) != b.props.get(k) and not (k == "configuration" and r.kind in RELOAD_KINDS)}
            act = engine.get(r.key)
            if act is None and r.key in plans[0].nodes and r.key in plans[1].nodes:
                continue  # the engine leaves it as it is, whatever its description shows (it shows more than it takes)
            if act is not None and not (set(changed) - INFORMATIVE_OF.get(r.kind, set())):
                # Nothing a reviewer reads changed, but the engine renews it: an input it takes from the host
                # (labels, the infra image) or from a renewed resource it refers to.
                changed = {**changed, **_inputs_changed(act, plans[1])}
            if not changed or set(changed) <= INFORMATIVE_OF.get(r.kind, set()):
                continue  # Pulumi would show it unchanged: only what a reviewer reads beside it changed
            change = ResourceChange(r, act.action if act is not None and r.kind != "provider" else
                                    _action(r, changed), changed,
                                    renewed_with=_renewed_names(act, plans[1]) if act is not None else ())
        changes.append(change)
    # A sandbox moves with its pool's network: a host-level effect that renews the network reaches it too.
    moved = {(c.resource.host, c.resource.pool) for c in changes if c.resource.kind == "network"
             and c.action == "replace"}
    # A host container that joins the pool networks is replaced with a replaced one (the change table's cascades).
    moved_hosts = {host for host, _ in moved}
    for change in changes:
        r = change.resource
        under = (r.host, r.pool) in moved if r.pool else r.host in moved_hosts
        explained = (explain(f, r, change.action, set(change.changed), old, new, moved=under) for f in fields)
        change.reasons = [reason for reason in explained if reason is not None]
    changed_names = {c.resource.name for c in changes}
    unchanged = sum(1 for name, r in after.items()
                    if name not in changed_names and not r.type.startswith(COMPONENT_TYPE))
    return Diff(compare(old, new), changes, _snapshot_changes(old, new, changes), fields,
                {f.path: _pools_of(f.path, old, new) for f in fields}, unchanged, compare_capacity(old, new),
                reserved(old, new), plans=plans)


def _pools_of(path: str, old: ResolvedStack, new: ResolvedStack) -> tuple[str, ...]:
    head, _, rest = path.partition(".")
    key = rest.split(".", 1)[0]
    pools = {name: pool for spec in (old, new) for name, pool in spec.pools.items()}
    if head == "pools":
        return (key,)
    if head == "hosts":
        return tuple(sorted({name for spec in (old, new) for name, pool in spec.pools.items() if key in pool.hosts}))
    if head == "templates":
        return tuple(sorted({name for spec in (old, new) for name, pool in spec.pools.items()
                            if pool.template == key or key in _ancestors(spec, pool.template)}))
    return tuple(sorted(pools))  # defaults, profiles: every pool may inherit them


def _ancestors(spec: ResolvedStack, template: str) -> set[str]:
    out, current = set(), spec.written.templates.get(template)
    while current is not None and current.extends and current.extends not in out:
        out.add(current.extends)
        current = spec.written.templates.get(current.extends)
    return out
