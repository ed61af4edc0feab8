"""Registers a StackPlan's nodes (sandstack/plan/stack.py) exactly as planned: the one place plan values become
Pulumi resources. A `Ref` becomes the referenced resource's output, a `Secret` the secret config value; a run-once
seeder is waited for through its exit code. Components are the `Planned` subclasses, one per file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pulumi
import pulumi_docker as docker

from sandstack.components import lean
from sandstack.components.secrets import secret_value
from sandstack.plan.snapshot import prepare_build
from sandstack.plan.stack import StackPlan
from sandstack.plan.tree import (CONTAINER, NETWORK, PROVIDER, REGISTRY_IMAGE, REMOTE_IMAGE, VOLUME, After, Node, Ref,
                                 Secret)

RESOURCES: dict[str, type[pulumi.CustomResource]] = {
    CONTAINER: docker.Container, NETWORK: docker.Network, VOLUME: docker.Volume, REMOTE_IMAGE: docker.RemoteImage,
    REGISTRY_IMAGE: docker.RegistryImage, PROVIDER: docker.Provider,
}
COMPONENTS: dict[str, type["Planned"]] = {}  # by type token, filled by each component's module


def _checked(seeder: docker.Container, what: str, missing: str) -> pulumi.Output[docker.Container]:
    """The seeder (or a host service's reload container), once it exited 0: the provider records a failed run-once
    container's exit code without failing; we fail, with the end of its log (what a reload's service refused), so no
    sandbox starts without what it was seeded with."""
    def check(args: list) -> docker.Container:
        code, logs = args
        if code not in (None, 0):
            said = " | ".join(line for line in (logs or "").splitlines()[-LOG_LINES:] if line.strip())
            raise pulumi.RunError(f"{what} exited with {code}: {missing}" + (f"; its log: {said}" if said else ""))
        return seeder
    return pulumi.Output.all(seeder.exit_code, seeder.container_logs).apply(check)


LOG_LINES = 5  # of a failed seeder's or reload container's log, in the apply's error


@dataclass(frozen=True)
class Carried:
    """A value of the spec that came from another resource's output (the Pulumi package's typed input): every
    input whose text holds it depends on those resources, and is secret when the value was."""

    text: str
    resources: tuple[pulumi.Resource, ...] = ()
    secret: bool = False


class Registry:
    """One stack's registered nodes, by key."""

    def __init__(self, plan: StackPlan, build_root, carried: tuple[Carried, ...] = ()):
        self.plan = plan
        self.build_root = build_root
        self.carried = tuple(c for c in carried if c.text)
        self.resources: dict[str, pulumi.Resource] = {}
        self.waits: dict[str, Any] = {}  # what depends_on uses, where it is not the resource itself
        self.components: list[Planned] = []  # in registration order
        self.seeders = {key: (what, f"its sandboxes would start without {missing}")
                        for pool in plan.pools.values() for key, what, missing in pool.seeders}
        self.seeders.update({key: (f"the {role} configuration reload on host '{host}'",
                                   "the previous configuration stays in force")
                             for host, keys in plan.host_keys.items() for key, role in keys.reloads.items()})

    def value(self, value: Any, found: set | None = None) -> Any:
        """A plan value as a Pulumi input; `found` collects the resources of the carried values it holds."""
        if self.carried and isinstance(value, str):
            return self.carry(value, found)
        if isinstance(value, Ref):
            return getattr(self.resources[value.node], value.attr)
        if isinstance(value, After):  # the text, with the nodes as its dependencies
            return pulumi.Output.all(*(self.resources[n].urn for n in value.nodes)).apply(lambda _: value.text)
        if isinstance(value, Secret):
            plain = value.text == "{}" and not value.derive
            return secret_value(value.key) if plain else secret_value(value.key).apply(value.render)
        if isinstance(value, dict):
            return {k: self.value(v, found) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.value(v, found) for v in value]
        return value

    def carry(self, text: str, found: set | None) -> Any:
        """`text`, secret if it holds a secret carried value; their resources go into `found`."""
        held = [c for c in self.carried if c.text in text]
        if found is not None:
            found.update(r for c in held for r in c.resources)
        return pulumi.Output.secret(text) if any(c.secret for c in held) else text

    def options(self, node: Node, carried: set | None = None) -> pulumi.ResourceOptions:
        o = node.options
        provider = self.resources[node.provider] if node.provider else None
        depends_on = [self.waits.get(k, self.resources.get(k)) for k in o.depends_on] + sorted(
            carried or (), key=id)
        return pulumi.ResourceOptions(
            parent=self.resources[node.parent] if node.parent else None,
            provider=provider if node.custom else None,
            providers=[provider] if provider and not node.custom else None,
            depends_on=depends_on or None,
            delete_before_replace=o.delete_before_replace or None,
            replace_on_changes=list(o.replace_on_changes) or None,
            aliases=list(o.aliases) or None)

    def register(self, node: Node) -> pulumi.Resource:
        found: set = set()
        if not node.custom:
            inputs = self.value(dict(node.inputs), found) if self.carried else dict(node.inputs)
            component = COMPONENTS[node.type](node.name, PlannedArgs(self, node.key, inputs),
                                              self.options(node, found))
            self.components.append(component)
            return component
        if node.key in self.plan.build_contexts:  # write the snapshot's build context before it is built
            build = prepare_build(self.plan.build_contexts[node.key], self.build_root)
            if self.carried:  # its Dockerfile (base image, setup) is no input: the values it holds count too
                self.carry(build.dockerfile, found)
        cls, inputs = RESOURCES[node.type], self.value(dict(node.inputs), found)
        opts = self.options(node, found)
        # Set inputs only (components/lean.py): the same request, ~11 ms of CPU per sandbox container instead of ~20.
        resource = (lean.Registration(cls, node.type, node.name, inputs, opts).resource if cls in lean.ARGS
                    else cls(node.name, **inputs, opts=opts))
        self.resources[node.key] = resource
        if node.key in self.seeders:
            self.waits[node.key] = _checked(resource, *self.seeders[node.key])  # type: ignore[arg-type]
        return resource

    def register_all(self) -> None:
        """Every node below the root, in plan order (a parent before its children, a node after what it refers
        to), from one loop; then each component's outputs, innermost first. One flat loop rather than each
        component registering its children: the SDK records the Python stack at every registration, and its
        cost grew with the nesting (stack → host → pool → sandbox)."""
        for node in self.plan:
            if node.key != self.plan.root:
                self.register(node)
        for component in reversed(self.components):
            component.finish()

    def children(self, key: str) -> dict[str, pulumi.Resource]:
        return {k: self.resources[k] for k in self.plan.kids.get(key, ())}


@dataclass(frozen=True)
class PlannedArgs:
    registry: Registry
    key: str  # the component's node
    inputs: dict | None = None  # its inputs, where carried values made some Pulumi inputs (Registry.carry)


class Planned(pulumi.ComponentResource):
    """A component of the plan: registered as its node; its children are registered after it by the same loop
    (Registry.register_all), then it registers its outputs (`finish`)."""

    TYPE: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        COMPONENTS[cls.TYPE] = cls

    def __init__(self, name: str, args: PlannedArgs, opts: pulumi.ResourceOptions | None = None):
        registry = args.registry
        node = registry.plan.nodes[args.key]
        inputs = dict(node.inputs) if args.inputs is None else args.inputs
        super().__init__(self.TYPE, name, inputs or None, opts)
        registry.resources[args.key] = self
        self.node, self.registry = node, registry

    def finish(self) -> None:
        """Once every node is registered (Registry.register_all): this component's outputs."""
        self.parts = self.registry.children(self.node.key)
        self.register_outputs(self.planned_outputs())

    def part(self, suffix: str) -> Any:
        """The child whose logical name is this component's name + suffix."""
        found = [r for key, r in self.parts.items() if key.endswith(f"::{self.node.name}{suffix}")]
        return found[0] if found else None

    def planned_outputs(self) -> dict[str, Any]:
        return {}
