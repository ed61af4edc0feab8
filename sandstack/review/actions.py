"""What `pulumi up` does to each resource going from one StackPlan to another, decided as the engine does.

Per custom node: created, deleted, or, when an input changed, updated or replaced by the provider's table
(sandstack.plan.provider_table: ForceNew inputs replace, others update in place or only in state) and the node's
`replace_on_changes`. An input that refers to a replaced node (`Ref`) is unknown until that node is renewed, so it
counts as changed: this is how a replaced image renews its containers, and Pulumi's rule that a
delete-before-replace resource (a pool network, a named volume) replaces the dependents whose ForceNew inputs
depend on it. A provider whose configuration changes is updated, with no cascade; components are never diffed.
Nodes are visited in registration order, so a node is decided before anything that refers to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandstack.plan.provider_table import REPLACE, change_of
from sandstack.plan.stack import StackPlan
from sandstack.plan.tree import CONTAINER, PROVIDER, After, Node, Ref


@dataclass(frozen=True)
class Action:
    action: str  # create, update, replace, delete
    changed: tuple[str, ...] = ()  # the inputs that changed (Python names)
    renewed: tuple[str, ...] = ()  # keys of replaced or created nodes a changed input refers to


def _refs(value: Any) -> set[Ref]:
    if isinstance(value, Ref):
        return {value}
    if isinstance(value, dict):
        return set().union(*(_refs(v) for v in value.values())) if value else set()
    if isinstance(value, (list, tuple)):
        return set().union(*(_refs(v) for v in value)) if value else set()
    return set()


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _afters(value: Any) -> set[str]:
    if isinstance(value, After):
        return set(value.nodes)
    if isinstance(value, dict):
        return set().union(*(_afters(v) for v in value.values())) if value else set()
    if isinstance(value, (list, tuple)):
        return set().union(*(_afters(v) for v in value)) if value else set()
    return set()


def _rendered(value: Any) -> Any:
    """The value the provider sees: an `After` is its text (its dependencies are no part of it)."""
    if isinstance(value, After):
        return value.text
    if isinstance(value, dict):
        return {k: _rendered(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rendered(v) for v in value]
    return value


def _decide(before: Node, after: Node, renewed: dict[str, bool], first: set[str]) -> Action | None:
    changed, causes = [], set()
    for name in dict.fromkeys([*after.inputs, *before.inputs]):
        old, new = before.inputs.get(name), after.inputs.get(name)
        # A renewed node's output differs, except the explicit `name` of one created before the old is deleted:
        # `pulumi up` registers the dependent with the same name again. Delete-before-replace always renews it.
        moved = {r.node for r in _refs(new) if r.node in renewed and (r.attr != "name" or renewed[r.node])}
        # A dependency alone (`After`) changes nothing, unless its node is replaced delete-before-replace: Pulumi's
        # dependent rule reads the dependencies the last run recorded (step_generator.go,
        # calculateDependentReplacements), so the old value's.
        moved |= _afters(old) & first
        if _rendered(old) != _rendered(new) or moved:
            changed.append(name)
            causes |= moved
    if not changed:
        return None
    if after.type == PROVIDER:
        return Action("update", tuple(changed))
    forced = set(after.options.replace_on_changes)
    replace = any(n in forced or change_of(after.type, camel(n)) == REPLACE for n in changed)
    return Action("replace" if replace else "update", tuple(changed), tuple(sorted(causes)))


def planned_actions(old: StackPlan, new: StackPlan) -> dict[str, Action]:
    """Every custom node's action, by key (unchanged nodes are left out)."""
    out: dict[str, Action] = {}
    renewed: dict[str, bool] = {}  # replaced or created node → whether dependents see it renewed by name too
    first: set[str] = set()  # nodes replaced delete-before-replace
    for key, node in new.nodes.items():
        if not node.custom:
            continue
        if key not in old.nodes:
            out[key] = Action("create")
            renewed[key] = True
            continue
        action = _decide(old.nodes[key], node, renewed, first)
        if action is None:
            continue
        out[key] = action
        if action.action == "replace":
            renewed[key] = node.options.delete_before_replace or "name" in action.changed
            if node.options.delete_before_replace or node.type == CONTAINER:  # pulumi-docker's containers too
                first.add(key)
    for key, node in old.nodes.items():
        if node.custom and key not in new.nodes:
            out[key] = Action("delete")
    return out
