"""RuntimeService: the host's sandbox runtime (sandstack.runtime), through which agent platforms claim the
declared pools' sandboxes per session, run commands, move files, snapshot, pause and release them.

It runs in the host's network namespace: the guard's rules already drop every new connection from a sandbox
bridge to the host, so no sandbox of any egress mode can reach it. Besides the guard it is the only sandstack
container with the Docker socket, which it needs for exec, archives, pause and restart; it never creates a
sandbox (a reset empties disk workspaces with a throwaway container, docs/design/runtime.md). Its plan is
sandstack/plan/runtime_host.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_docker as docker

from sandstack.components.resource_args import container_labels, run_args, volume_labels
from sandstack.components.secrets import secret_value
from sandstack.plan import runtime_host
from sandstack.plan import types
from sandstack.plan.changes import host_container_replace_on_changes
from sandstack.plan.contract import LABEL_ROLE
from sandstack.plan.runtime import DEFAULT_STATE_DIR, ENV_TOKEN


@dataclass(frozen=True)
class RuntimeServiceArgs:
    plan: runtime_host.RuntimeHostPlan
    image: pulumi.Input[str]
    labels: dict[str, str]
    after: list[pulumi.Resource]  # the guard: no session starts on a host that is not closed


class RuntimeService(pulumi.ComponentResource):
    container_name: pulumi.Output[str]

    def __init__(self, name: str, args: RuntimeServiceArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(types.RUNTIME_SERVICE, name, None, opts)
        plan, run = args.plan, args.plan.run

        # Sessions, snapshots and the audit log outlive a restart or renewal of the service.
        self.state = docker.Volume(
            f"{name}-state", name=plan.state_volume, labels=volume_labels(args.labels),
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )
        token = secret_value(plan.spec.token.secret).apply(lambda value: f"{ENV_TOKEN}={value}")
        # The service: sandstack's code (from its environment) on the infra image's Python, no capabilities, a
        # read-only root.
        self.container = docker.Container(
            f"{name}-container",
            name=plan.container_name,
            image=args.image,
            network_mode="host",
            command=["sh", "-c", runtime_host.ENTRYPOINT],
            envs=[*plan.env, token],
            capabilities=docker.ContainerCapabilitiesArgs(drops=["ALL"]),
            security_opts=["no-new-privileges:true"],
            read_only=True,
            tmpfs=dict(runtime_host.TMPFS),
            mounts=[
                docker.ContainerMountArgs(type="bind", source=runtime_host.DOCKER_SOCKET,
                                          target=runtime_host.DOCKER_SOCKET),
                docker.ContainerMountArgs(type="volume", source=self.state.name, target=DEFAULT_STATE_DIR),
            ],
            memory=runtime_host.MEMORY_MB,
            memory_swap=runtime_host.MEMORY_MB,
            cpus=runtime_host.CPUS,
            **run_args(run),  # restart, health check, wait, grace, log rotation: from the plan
            labels=container_labels({**args.labels, LABEL_ROLE: "runtime"}),
            opts=pulumi.ResourceOptions(parent=self, depends_on=args.after,
                                        replace_on_changes=host_container_replace_on_changes()),
        )
        self.container_name = self.container.name
        self.register_outputs({"container_name": self.container_name, "state_volume": self.state.name})
