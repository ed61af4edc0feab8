"""`sandstack diff BASE HEAD`: what `pulumi up` would do going from one spec to the other, and why.

Both specs become their resource lists (sandstack.review.resources, from the plan the components
register). A resource only in HEAD is created, only in BASE deleted; one in both with changed settings is
replaced unless every changed setting is one the provider updates in place (sandstack.plan.changes), and
its reasons are the changed spec fields whose declared effect (the change table) reaches that kind of
resource, in the table's words. The security summary (sandstack.review.security) comes first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from sandstack.plan.changes import UPDATED_IN_PLACE
from sandstack.plan.snapshot import build_inputs
from sandstack.review.resources import Resource, stack_resources
from sandstack.review.security import Finding, compare
from sandstack.spec.changes import Effect
from sandstack.spec.models import Stack
from sandstack.spec.models.base import change_of
from sandstack.spec.resolve import ResolvedStack
from sandstack.spec.walk import model_fields

# Settings shown for a reviewer that are not inputs of their own (each reaches Docker through another one).
INFORMATIVE = {"egress", "lifecycle", "secret_files", "replace_on_changes", "pids", "data"}  # pids: the guard's
COMPONENT_TYPE = "sandstack:index:"


@dataclass(frozen=True)
class FieldChange:
    path: str  # concrete spec path, e.g. templates.coder.limits.cpus
    old: Any
    new: Any
    effect: Effect

    def text(self) -> str:
        if "(declared)" in (self.old, self.new):
            what = f"{self.path} {'added' if self.old is None else 'removed'}"
        else:
            what = describe(self.path, self.old, self.new)
        return f"{what} [{self.effect.label}]"


@dataclass
class ResourceChange:
    resource: Resource
    action: str  # create, update, replace, delete
    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    reasons: list[FieldChange] = field(default_factory=list)

    def to_json(self) -> dict:
        r = self.resource
        return {"name": r.name, "type": r.type, "kind": r.kind, "host": r.host, "pool": r.pool,
                "template": r.template, "action": self.action,
                "changed": {k: {"old": o, "new": n} for k, (o, n) in sorted(self.changed.items())},
                "reasons": [{"path": c.path, "old": c.old, "new": c.new, "effect": c.effect.label}
                            for c in self.reasons]}


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

    def counts(self) -> dict[str, int]:
        out = {"create": 0, "update": 0, "replace": 0, "delete": 0}
        for c in self.changes:
            if not c.resource.type.startswith(COMPONENT_TYPE):
                out[c.action] += 1
        return out

    def loosens(self) -> bool:
        return any(f.loosens for f in self.security)

    def replaces(self) -> bool:
        return any(c.action in ("replace", "delete") and not c.resource.type.startswith(COMPONENT_TYPE)
                   for c in self.changes)


def describe(key: str, old: Any, new: Any, limit: int = 6) -> str:
    """One changed setting in words: entries added and removed for lists and maps, else old → new."""
    if isinstance(old, dict) and isinstance(new, dict):
        parts = [f"+{k}={_show(new[k])}" for k in new if k not in old]
        parts += [f"-{k}" for k in old if k not in new]
        parts += [f"{k}: {_show(old[k])} → {_show(new[k])}" for k in new if k in old and old[k] != new[k]]
    elif isinstance(old, str) and isinstance(new, str) and "\n" in old + new:
        a, b = old.splitlines(), new.splitlines()
        parts = [f"+{_show(v)}" for v in b if v not in a] + [f"-{_show(v)}" for v in a if v not in b]
    elif isinstance(old, list) and isinstance(new, list) and all(isinstance(v, str) for v in old + new):
        parts = [f"+{_show(v)}" for v in new if v not in old] + [f"-{_show(v)}" for v in old if v not in new]
        if not parts:
            parts = ["order changed"]
    else:
        return f"{key}: {_show(old)} → {_show(new)}"
    more = f" … and {len(parts) - limit} more" if len(parts) > limit else ""
    return f"{key}: " + "; ".join(parts[:limit]) + more


def _show(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, dict) and set(value) == {"secret"}:
        return f"<secret {value['secret']}>"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


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
            out.append(FieldChange(f"{block}.{key}", "(declared)" if key in keys_a else None,
                                   "(declared)" if key in keys_b else None, _effect_of_leaf(block)))
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    _flatten(raw_a, "", a)
    _flatten(raw_b, "", b)
    for path in sorted(set(a) | set(b)):
        if a.get(path) != b.get(path) and ".".join(path.split(".")[:2]) not in whole:
            out.append(FieldChange(path, a.get(path), b.get(path), _effect_of_leaf(path)))
    return sorted(out, key=lambda c: c.path)


def _effect_of_leaf(path: str) -> Effect:
    """The declared effect of the field at `path`, or of the nearest declared field above it (a map entry)."""
    parts = path.split(".")
    while parts:
        effect = effect_at(".".join(parts))
        if effect is not None:
            return effect
        parts.pop()
    raise KeyError(path)


def _concerns(change: FieldChange, r: Resource, pools_on_host: dict[str, str]) -> bool:
    """Whether a spec change is about this resource's host, pool or template (or the shared layers)."""
    head, _, rest = change.path.partition(".")
    key = rest.split(".", 1)[0]
    if head == "hosts":
        return key == r.host
    if head in ("defaults", "profiles"):
        return True
    if head == "pools":
        return key == r.pool if r.pool else key in pools_on_host
    if head == "templates":
        return key == r.template if r.template else key in pools_on_host.values()
    return False


def _reaches(effect: Effect, kind: str, changed: set[str]) -> bool:
    """Whether a declared effect (with its conditions) can change this kind of resource (for a sandbox, a
    host-level effect only through its network or provider)."""
    effects = [effect] + [e for _, e in effect.when]
    host_any = any(e.host is None for e in effects)
    roles = set().union(*[(e.host or set()) for e in effects])
    if kind == "sandbox":
        return any(e.sandboxes != "none" or e.snapshot != "none" for e in effects) or (
            host_any and "network" in changed)
    if kind == "snapshot":
        return any(e.snapshot != "none" for e in effects)
    if kind in ("secrets volume", "secrets seeder"):
        return any(e.secrets for e in effects) or host_any
    if kind in ("data volume", "data loader"):
        return any(e.data for e in effects) or host_any
    if kind in ("guard", "guard state"):
        return "guard" in roles or host_any
    if kind in ("gateway", "gateway log"):
        return "gateway" in roles or host_any
    if kind in ("network", "egress network"):
        return "networks" in roles or host_any
    return host_any


# --- resources --------------------------------------------------------------------------------------------

def _action(r: Resource, changed: dict[str, tuple[Any, Any]]) -> str:
    if r.kind == "provider":
        return "update"
    settings = set(changed) - INFORMATIVE if r.kind == "sandbox" else set(changed)
    if not settings:
        return "update"
    if r.type.endswith("/container:Container") and settings <= UPDATED_IN_PLACE:
        return "update"
    return "replace"


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
        if a["supervisor"] != b["supervisor"] or a["format"] != b["format"]:
            why.append("sandstack's supervisor or build format changed")
        unbumped = a["version"] == b["version"] and any(w in why for w in ("setup changed", "files changed")) \
            or (a["version"] == b["version"] and a["base_image"] != b["base_image"])
        out.append(SnapshotChange(c.resource.host or "", t or "", why, unbumped))
    return out


def diff(old: ResolvedStack, new: ResolvedStack, stack: str) -> Diff:
    before = {r.name: r for r in stack_resources(old, stack)}
    after = {r.name: r for r in stack_resources(new, stack)}
    fields = field_changes(old.spec, new.spec)
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
            changed = {k: (a.props.get(k), b.props.get(k)) for k in set(a.props) | set(b.props)
                       if a.props.get(k) != b.props.get(k)}
            if not changed or (r.kind == "sandbox" and set(changed) <= INFORMATIVE):
                continue  # Pulumi would show it unchanged: only what a reviewer reads beside it changed
            change = ResourceChange(r, _action(r, changed), changed)
        spec = new if b else old
        pools_on_host = {p: pool.template for p, pool in spec.pools.items() if r.host in pool.hosts}
        change.reasons = [f for f in fields if _concerns(f, r, pools_on_host) and (
            _reaches(f.effect, r.kind, set(change.changed))
            or (change.action in ("create", "delete") and (f.effect.scope == "placement" or f.old is None or f.new is None)))]
        changes.append(change)
    return Diff(compare(old, new), changes, _snapshot_changes(old, new, changes))

