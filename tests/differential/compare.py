"""The differential check: what the program registers under Pulumi's mocks is exactly the StackPlan's nodes.

`compare(plan, mocks, secrets)` lists every difference, node by node: a node not registered or a registration not
planned; the type, name, parent and provider; the resource options (delete_before_replace, replace_on_changes,
dependencies: the planned depends_on plus every node an input refers to, as the SDK adds them); and every input,
with each `Ref` resolved to the referenced registration's recorded output and each `Secret` to its config value,
in the wire's names (camelCase, as the SDK sends them).
"""

from __future__ import annotations

from typing import Any

from sandstack.plan.stack import StackPlan
from sandstack.plan.tree import After, Node, Ref, Secret
from testbed.provider.mocks import RecordingMocks, Registration
from testbed.provider.wire import MAPS, camel, to_wire  # noqa: F401 (MAPS: re-exported for the recipe test)


class Expected:
    def __init__(self, mocks: RecordingMocks, secrets: dict[str, str]):
        self.by_key = {f"{r.typ}::{r.name}": r for r in mocks.registrations.values()}
        self.secrets = secrets

    def value(self, value: Any, refs: set[str]) -> Any:
        def leaf(v: Any) -> Any:
            if isinstance(v, Ref):
                refs.add(v.node)
                return self.by_key[v.node].outputs[camel(v.attr)]
            if isinstance(v, Secret):
                return v.render(self.secrets[v.key])
            if isinstance(v, After):
                refs.update(v.nodes)
                return v.text
            return v
        return to_wire(value, leaf)


def _key_of_urn(urn: str) -> str:
    """`urn:pulumi:stack::project::parent$type::name` → `type::name`."""
    typ, name = urn.split("::", 3)[2:]
    return f"{typ.rsplit('$', 1)[-1]}::{name}"


def compare(plan: StackPlan, mocks: RecordingMocks, secrets: dict[str, str]) -> list[str]:
    expected = Expected(mocks, secrets)
    planned, registered = set(plan.nodes), set(expected.by_key)
    problems = [f"planned, not registered: {k}" for k in sorted(planned - registered)]
    problems += [f"registered, not planned: {k}" for k in sorted(registered - planned)]
    for key in sorted(planned & registered):
        problems += [f"{key}: {p}" for p in _node_problems(plan.nodes[key], expected.by_key[key], expected)]
    return problems


def _node_problems(node: Node, reg: Registration, expected: Expected) -> list[str]:
    out = []
    info = reg.request
    assert info is not None
    parent = _key_of_urn(info.parent) if info.parent else None
    if node.parent is None and parent and parent.startswith("pulumi:pulumi:Stack::"):
        parent = None  # the program's root: the stack component's parent is Pulumi's own Stack resource
    if parent != node.parent:
        out.append(f"parent {parent} != planned {node.parent}")
    if node.custom and node.provider is not None:
        provider = _key_of_urn(reg.provider.split("::" + reg.provider.rsplit("::", 1)[-1])[0]) if reg.provider else None
        if provider != node.provider:
            out.append(f"provider {provider} != planned {node.provider}")
    refs: set[str] = set()
    wire = expected.value(dict(node.inputs), refs)
    if node.type == "pulumi:providers:docker":
        wire = {k: (_json(v) if isinstance(v, list) else v) for k, v in wire.items()}
    if reg.inputs != wire:
        keys = sorted(set(reg.inputs) | set(wire))
        diffs = [f"{k}: registered {reg.inputs.get(k)!r} != planned {wire.get(k)!r}"[:400] for k in keys
                 if reg.inputs.get(k) != wire.get(k)]
        out += diffs
    deps = {_key_of_urn(u) for u in info.dependencies}
    if deps != set(node.options.depends_on) | refs:
        out.append(f"dependencies {sorted(deps)} != planned {sorted(set(node.options.depends_on) | refs)}")
    if info.delete_before_replace != node.options.delete_before_replace:
        out.append(f"delete_before_replace {info.delete_before_replace} != planned")
    if tuple(info.replace_on_changes) != tuple(camel(k) for k in node.options.replace_on_changes) and \
            tuple(info.replace_on_changes) != tuple(node.options.replace_on_changes):
        out.append(f"replace_on_changes {info.replace_on_changes} != planned {node.options.replace_on_changes}")
    return out


def _json(value: Any) -> str:
    import json
    return json.dumps(value)

