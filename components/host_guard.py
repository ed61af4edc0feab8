"""HostGuard: the one privileged piece, closing a Docker host to its own sandboxes.

Docker filters traffic between networks but never traffic from a container to the host itself, and
pulumi-docker has no pids-limit input. The guard fixes both on the host it runs on: it keeps the
firewall rules of `network_plan.py` in place and pre-creates each sandbox's cgroup parent with its
`pids.max`, before any sandbox starts (docs/design/engine-findings.md a, b).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_docker as docker

from components.naming import container_labels, infra_name, volume_labels

GUARD_SCRIPT = (Path(__file__).parent / "assets" / "guard.sh").read_text()
STATE_MOUNT = "/run/sandstack/guard"  # where sandboxes see the guard's state, read-only
# Healthy = a complete pass in the last minute on this boot.
HEALTH_TEST = (
    'test "$(cat /state/ready 2>/dev/null)" = "$(cat /proc/sys/kernel/random/boot_id)" '
    "&& test -n \"$(find /state/ready -mmin -1)\""
)


def cgroup_parent(container_name: str) -> str:
    """The sandbox's cgroup parent, whose pids.max the guard writes."""
    return f"/sandstack/{container_name}"


@dataclass(frozen=True)
class HostGuardArgs:
    stack: str
    image: pulumi.Input[str]
    rules: list[str]
    bridges: list[str]
    pids: dict[str, int]  # container name → max processes
    labels: dict[str, str]


class HostGuard(pulumi.ComponentResource):
    state_volume: pulumi.Output[str]
    container_name: pulumi.Output[str]

    def __init__(self, name: str, args: HostGuardArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("sandstack:index:HostGuard", name, None, opts)
        pids_lines = "\n".join(f"{n} {m}" for n, m in sorted(args.pids.items()))

        # State shared with sandboxes (read-only there): they wait for its boot-id marker, so after
        # a reboot no sandbox command runs before the firewall and pids limits are back.
        self.state = docker.Volume(
            f"{name}-state", name=infra_name(args.stack, "guard-state"), labels=volume_labels(args.labels),
            # A named volume cannot exist twice: the old one must go before its replacement is made.
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )
        # The guard: host network namespace for the firewall, the host's cgroup tree for pids limits,
        # and only the three capabilities those need, with a read-only root.
        self.container = docker.Container(
            f"{name}-guard",
            name=infra_name(args.stack, "guard"),
            image=args.image,
            network_mode="host",
            command=["sh", "-c", GUARD_SCRIPT, "sandstack-guard"],
            envs=[
                f"SANDSTACK_STACK={args.stack}",
                "SANDSTACK_RULES=" + "\n".join(args.rules),
                f"SANDSTACK_PIDS={pids_lines}",
                "SANDSTACK_BRIDGES=" + " ".join(sorted(args.bridges)),
            ],
            capabilities=docker.ContainerCapabilitiesArgs(drops=["ALL"], adds=["NET_ADMIN", "NET_RAW", "DAC_OVERRIDE"]),
            security_opts=["no-new-privileges:true"],
            read_only=True,
            tmpfs={"/tmp": "rw,nosuid,nodev,size=1m"},
            mounts=[
                docker.ContainerMountArgs(type="bind", source="/sys/fs/cgroup", target="/host-cgroup"),
                docker.ContainerMountArgs(type="volume", source=self.state.name, target="/state"),
            ],
            memory=64,
            memory_swap=64,
            restart="unless-stopped",
            # Time for the stop handler: on `pulumi destroy` it removes the rules and cgroups it made.
            destroy_grace_seconds=10,
            healthcheck=docker.ContainerHealthcheckArgs(
                tests=["CMD-SHELL", HEALTH_TEST], interval="2s", timeout="2s", retries=3, start_period="1s"
            ),
            wait=True,
            wait_timeout=60,
            log_driver="json-file",
            log_opts={"max-size": "1m", "max-file": "2"},
            labels=container_labels({**args.labels, "sandstack.role": "guard"}),
            opts=pulumi.ResourceOptions(
                parent=self, replace_on_changes=["healthcheck", "wait", "wait_timeout", "tmpfs", "destroy_grace_seconds"]
            ),
        )
        self.state_volume = self.state.name
        self.container_name = self.container.name
        self.register_outputs({"state_volume": self.state_volume, "container_name": self.container_name})
