"""HostGuard: the one privileged piece, closing a Docker host to its own sandboxes.

Docker filters traffic between networks but never traffic from a container to the host itself, and
pulumi-docker has no pids-limit input. The guard fixes both on the host it runs on: it keeps the
firewall rules of `network_plan.py` in place and pre-creates each sandbox's cgroup parent with its
`pids.max`, before any sandbox starts (docs/design/engine-findings.md a, b).

It also enforces lifetimes and idle timeouts from outside the sandboxes: anything inside a sandbox runs
as the sandbox's user in the sandbox's PID namespace, so an in-sandbox supervisor can be stopped, traced
or killed by the very code it limits (docs/design/lifecycle.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_docker as docker

from sandstack.plan.changes import host_container_replace_on_changes
from sandstack.plan.naming import infra_name
from sandstack.plan.package_files import GUARD_SCRIPT_FILE
from sandstack.components.resource_args import container_labels, volume_labels
from sandstack.spec.models.limits import EXIT_IDLE, EXIT_LIFETIME, IDLE_CPU_MS_PER_S
from sandstack.spec.resolve import ResolvedTemplate

GUARD_SCRIPT = GUARD_SCRIPT_FILE.read_text()
# CPU a sandbox may use and still be idle: 20 ms per second, plus what its readiness probe may cost
# (a `docker exec` runs the probe inside the sandbox's cgroup): a share per second and one run's worth
# as a burst, so a probe never counts as activity and an agent's command does.
IDLE_CPU_US_PER_S = IDLE_CPU_MS_PER_S * 1000
PROBE_CPU_BUDGET_US = 100_000
# The documented exit statuses of an expired sandbox, given to the guard script (which signals the
# supervisor accordingly) rather than repeated in it.
EXIT_STATUS_ENVS = [f"SANDSTACK_EXIT_LIFETIME={EXIT_LIFETIME}", f"SANDSTACK_EXIT_IDLE={EXIT_IDLE}"]
# Healthy = a complete pass in the last minute on this boot.
HEALTH_TEST = (
    'test "$(cat /state/ready 2>/dev/null)" = "$(cat /proc/sys/kernel/random/boot_id)" '
    "&& test -n \"$(find /state/ready -mmin -1)\""
)


def lifecycle_line(container_name: str, template: ResolvedTemplate) -> str | None:
    """The guard's lifecycle entry for one sandbox: `name max idle on_expiry idle_us_per_s burst_us`."""
    life = template.lifecycle
    if not life.max_lifetime and not life.idle_timeout:
        return None
    per_second, burst = IDLE_CPU_US_PER_S, 0
    if template.readiness and life.idle_timeout:
        per_second += PROBE_CPU_BUDGET_US // template.readiness.interval
        burst = PROBE_CPU_BUDGET_US
    return f"{container_name} {life.max_lifetime} {life.idle_timeout} {life.on_expiry} {per_second} {burst}"


@dataclass(frozen=True)
class HostGuardArgs:
    stack: str
    image: pulumi.Input[str]
    rules: list[str]
    bridges: list[str]
    pids: dict[str, int]  # container name → max processes
    lifecycle: list[str]  # lifecycle_line() of each sandbox with a limit
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
        # The guard: host network namespace for the firewall, the host's cgroup tree for pids limits, the
        # host's PID namespace and KILL to end sandboxes at their limits from outside, and only the
        # capabilities those need, with a read-only root.
        self.container = docker.Container(
            f"{name}-container",
            name=infra_name(args.stack, "guard"),
            image=args.image,
            network_mode="host",
            pid_mode="host",
            command=["sh", "-c", GUARD_SCRIPT, "sandstack-guard"],
            envs=[
                f"SANDSTACK_STACK={args.stack}",
                "SANDSTACK_RULES=" + "\n".join(args.rules),
                f"SANDSTACK_PIDS={pids_lines}",
                "SANDSTACK_BRIDGES=" + " ".join(sorted(args.bridges)),
                "SANDSTACK_LIFECYCLE=" + "\n".join(sorted(args.lifecycle)),
                *EXIT_STATUS_ENVS,
            ],
            capabilities=docker.ContainerCapabilitiesArgs(
                drops=["ALL"], adds=["NET_ADMIN", "NET_RAW", "DAC_OVERRIDE", "KILL"]),
            security_opts=["no-new-privileges:true"],
            read_only=True,
            # One small state file per running sandbox (its lifetime clock and idle counters).
            tmpfs={"/tmp": "rw,nosuid,nodev,noexec,size=8m"},
            mounts=[
                docker.ContainerMountArgs(type="bind", source="/sys/fs/cgroup", target="/host-cgroup"),
                docker.ContainerMountArgs(type="volume", source=self.state.name, target="/state"),
            ],
            memory=64,
            memory_swap=64,
            # Enough for a pass a second over hundreds of sandboxes; bounded like everything else.
            cpus="0.5",
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
            opts=pulumi.ResourceOptions(parent=self, replace_on_changes=host_container_replace_on_changes()),
        )
        self.state_volume = self.state.name
        self.container_name = self.container.name
        self.register_outputs({"state_volume": self.state_volume, "container_name": self.container_name})
