"""SandboxStack: everything a validated spec declares, on every host it names: its plan (`plan_stack`), computed
once, registered node by node (components/register.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pulumi

# Every component registers itself for its type token when its module is imported.
from sandstack.components import (connection_logger, egress_gateway, host_guard, ingress_proxy,  # noqa: F401
                                  runtime_service, sandbox_host, sandbox_pool, sandbox_template)
from sandstack.components.register import Carried, Registry
from sandstack.plan import types
from sandstack.plan.stack import DEFAULT_BUILD_ROOT, plan_stack
from sandstack.spec.resolve import ResolvedStack

__all__ = ["Carried", "DEFAULT_BUILD_ROOT", "SandboxStack", "SandboxStackArgs"]
# Children are named `<name>-<host>`, `<name>-<pool>.<host>`: spec names may hold '-', so the component's
# name must not, or two stacks in one program could build the same child name ('a' + host 'b-c' and
# 'a-b' + host 'c').
COMPONENT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,62}$")


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a SandboxStack, or None."""
    if COMPONENT_NAME.match(name):
        return None
    return (f"SandboxStack name {name!r} is not allowed: use letters, digits and '_', starting with a letter "
            "(no '-': children are named '<name>-<host>', and spec names hold '-')")


@dataclass(frozen=True)
class SandboxStackArgs:
    spec: ResolvedStack
    stack: str
    build_root: Path = DEFAULT_BUILD_ROOT
    carried: tuple[Carried, ...] = ()  # values from other resources' outputs (components/register.py)


class SandboxStack(pulumi.ComponentResource):
    sandboxes: pulumi.Output[list[dict]]

    def __init__(self, name: str, args: SandboxStackArgs | None, opts: pulumi.ResourceOptions | None = None):
        """Registers the stack and, given its args, everything in it; without args (a spec whose values come from
        other resources' outputs, not known yet), `build` registers the children once they are."""
        problem = name_problem(name)
        if problem:
            raise ValueError(problem)
        super().__init__(types.SANDBOX_STACK, name, None, opts)
        if args is not None:
            self.build(args)

    def build(self, args: SandboxStackArgs) -> None:
        """Plans the spec and registers every child under this component, then its outputs."""
        name = self.pulumi_resource_name
        self.spec = args.spec
        # Every child is named after this component, so two stacks can share one program.
        self.plan = plan = plan_stack(args.spec, args.stack, name, args.build_root)
        registry = Registry(plan, args.build_root, args.carried)
        registry.resources[plan.root] = self
        registry.register_all()
        children = registry.children(plan.root)
        self.hosts = {host: children[keys.host] for host, keys in plan.host_keys.items()}
        self.pools = {(p.pool, p.host): registry.resources[key] for key, p in plan.pools.items()}
        self.templates = {(n.name, n.parent): registry.resources[n.key] for n in plan
                          if n.type == types.SANDBOX_TEMPLATE}
        self.sandboxes = pulumi.Output.all(*[p.sandboxes for p in self.pools.values()]).apply(
            lambda groups: [s for group in groups for s in group]
        )
        self.register_outputs({"sandboxes": self.sandboxes})
