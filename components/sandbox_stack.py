"""SandboxStack: everything a validated spec declares, on every host it names."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pulumi

from sandstack.components.sandbox_host import SandboxHost, SandboxHostArgs
from sandstack.components.sandbox_pool import SandboxPool, SandboxPoolArgs
from sandstack.components.sandbox_template import SandboxTemplate, SandboxTemplateArgs
from sandstack.plan import types
from sandstack.plan.host import placements_by_host, snapshot_owners
from sandstack.spec.resolve import ResolvedStack

DEFAULT_BUILD_ROOT = Path(".sandstack") / "build"
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


class SandboxStack(pulumi.ComponentResource):
    sandboxes: pulumi.Output[list[dict]]

    def __init__(self, name: str, args: SandboxStackArgs, opts: pulumi.ResourceOptions | None = None):
        problem = name_problem(name)
        if problem:
            raise ValueError(problem)
        super().__init__(types.SANDBOX_STACK, name, None, opts)
        self.spec = spec = args.spec
        self.hosts: dict[str, SandboxHost] = {}
        self.templates: dict[tuple[str, str], SandboxTemplate] = {}
        self.pools: dict[tuple[str, str], SandboxPool] = {}
        owners = snapshot_owners(spec)
        for host_name, placements in placements_by_host(spec).items():
            # Every child is named after this component, so two stacks can share one program.
            host = SandboxHost(
                f"{name}-{host_name}",
                SandboxHostArgs(stack=args.stack, host=host_name, spec=spec.hosts[host_name], placements=placements),
                opts=pulumi.ResourceOptions(parent=self),
            )
            self.hosts[host_name] = host
            for placement in placements:
                template = placement.template
                # Templates with the same snapshot content share one image on this host (the first one's).
                owner = spec.templates[owners[(host_name, template.name)]]
                key = (owner.name, host_name)
                if key not in self.templates:
                    self.templates[key] = SandboxTemplate(
                        f"{name}-{owner.name}.{host_name}",
                        SandboxTemplateArgs(template=owner, stack=args.stack, host=host_name,
                                            build_root=args.build_root, host_labels=host.labels),
                        opts=host.child_opts,
                    )
                image = self.templates[key]
                self.pools[(placement.pool, host_name)] = SandboxPool(
                    f"{name}-{placement.pool}.{host_name}",
                    SandboxPoolArgs(
                        stack=args.stack,
                        pool=placement.pool,
                        host=host_name,
                        host_address=host.address,
                        template=template,
                        replicas=placement.replicas,
                        image=image.image_id,
                        image_name=image.image_name,
                        digest=image.digest,
                        network=host.plans[placement.pool],
                        gpu_device_ids=host.plan.gpus.get(placement.pool, ()),
                        network_name=host.networks[placement.pool].name,
                        guard_state_volume=host.guard.state_volume,
                        infra_image=host.infra_image,
                        labels=host.labels,
                        depends_on=host.ready,
                        workspace_volumes=host.workspace_volumes,
                        ingress=spec.hosts[host_name].ingress,
                    ),
                    opts=host.child_opts,
                )
        self.sandboxes = pulumi.Output.all(*[p.sandboxes for p in self.pools.values()]).apply(
            lambda groups: [s for group in groups for s in group]
        )
        self.register_outputs({"sandboxes": self.sandboxes})
