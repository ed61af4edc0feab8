"""HostGuard: the one privileged piece, closing a Docker host to its own sandboxes.

Docker filters traffic between networks but never traffic from a container to the host itself, and
pulumi-docker has no pids-limit input. The guard fixes both on the host it runs on: it keeps the
firewall rules of `sandstack/plan/network.py` in place and pre-creates each sandbox's cgroup parent with
its `pids.max`, before any sandbox starts (docs/design/engine-findings.md a, b).

It also enforces lifetimes and idle timeouts from outside the sandboxes: anything inside a sandbox runs
as the sandbox's user in the sandbox's PID namespace, so an in-sandbox supervisor can be stopped, traced
or killed by the very code it limits (docs/design/lifecycle.md). What it enforces is its plan
(sandstack/plan/guard.py); this component only registers it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_docker as docker

from sandstack.components.resource_args import container_labels, run_args, volume_labels
from sandstack.plan import guard, types
from sandstack.plan.changes import host_container_replace_on_changes
from sandstack.plan.contract import GUARD_CGROUP_MOUNT, GUARD_STATE_DIR, HOST_CGROUP_MOUNT, LABEL_ROLE
from sandstack.plan.package_files import GUARD_SCRIPT_FILE

GUARD_SCRIPT = GUARD_SCRIPT_FILE.read_text()


@dataclass(frozen=True)
class HostGuardArgs:
    plan: guard.GuardPlan
    image: pulumi.Input[str]
    labels: dict[str, str]


class HostGuard(pulumi.ComponentResource):
    state_volume: pulumi.Output[str]
    container_name: pulumi.Output[str]

    def __init__(self, name: str, args: HostGuardArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(types.HOST_GUARD, name, None, opts)
        plan, run = args.plan, args.plan.run

        # State shared with sandboxes (read-only there): they wait for its boot-id marker, so after
        # a reboot no sandbox command runs before the firewall and pids limits are back.
        self.state = docker.Volume(
            f"{name}-state", name=plan.state_volume, labels=volume_labels(args.labels),
            # A named volume cannot exist twice: the old one must go before its replacement is made.
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )
        # The guard: host network and PID namespaces, the host's cgroup tree, only the capabilities it
        # needs, and a read-only root.
        self.container = docker.Container(
            f"{name}-container",
            name=plan.container_name,
            image=args.image,
            network_mode="host",
            pid_mode="host",
            command=["sh", "-c", GUARD_SCRIPT, "sandstack-guard"],
            envs=plan.env,
            capabilities=docker.ContainerCapabilitiesArgs(drops=["ALL"], adds=list(plan.capabilities)),
            security_opts=["no-new-privileges:true"],
            read_only=True,
            tmpfs=dict(guard.TMPFS),
            mounts=[
                docker.ContainerMountArgs(type="bind", source=HOST_CGROUP_MOUNT, target=GUARD_CGROUP_MOUNT),
                docker.ContainerMountArgs(type="volume", source=self.state.name, target=GUARD_STATE_DIR),
            ],
            # Disk workspaces only: the stack's directory of their images and loop device links (a `volumes`
            # bind, so the daemon makes the directory on a new host).
            volumes=[docker.ContainerVolumeArgs(host_path=plan.workspaces_mount[0], container_path=plan.workspaces_mount[1])]
            if plan.workspaces_mount else None,
            # Disk workspaces only: the loop devices that hold their filesystems.
            devices=[docker.ContainerDeviceArgs(host_path=guard.LOOP_CONTROL)] if plan.workspaces else None,
            device_cgroup_rules=list(guard.LOOP_DEVICE_RULES) if plan.workspaces else None,
            memory=guard.MEMORY_MB,
            memory_swap=guard.MEMORY_MB,
            cpus=guard.CPUS,
            **run_args(run),  # restart, health check, wait, grace, log rotation: from the plan
            labels=container_labels({**args.labels, LABEL_ROLE: "guard"}),
            opts=pulumi.ResourceOptions(parent=self, replace_on_changes=host_container_replace_on_changes()),
        )
        self.state_volume = self.state.name
        self.container_name = self.container.name
        self.register_outputs({"state_volume": self.state_volume, "container_name": self.container_name})
