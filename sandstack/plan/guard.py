"""The host guard's container, as plain values: what it enforces (rules, pids limits, lifecycle lines) and
how it runs (host namespaces, the few capabilities it needs, its mounts and health check).

The guard script (components/assets/guard.sh) repeats none of the contract: the paths it works on, the
cgroup subtree and the exit statuses arrive as environment variables from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandstack.plan.contract import (CGROUP_ROOT_NAME, CONFIG_DIR, EXIT_IDLE, EXIT_LIFETIME, GUARD_CGROUP_MOUNT, GUARD_STATE_DIR,
                                     GUARD_WORKSPACES_MOUNT, IDLE_CPU_MS_PER_S, workspace_dir)
from sandstack.plan.container import LogRotation, RunSettings, host_role
from sandstack.plan.naming import infra_name
from sandstack.plan.reload import ConfigSet
from sandstack.spec.resolve import ResolvedTemplate

# CPU a sandbox may use and still be idle: 20 ms per second, plus what its readiness probe may cost
# (a `docker exec` runs the probe inside the sandbox's cgroup): a share per second and one run's worth
# as a burst, so a probe never counts as activity and an agent's command does.
IDLE_CPU_US_PER_S = IDLE_CPU_MS_PER_S * 1000
PROBE_CPU_BUDGET_US = 100_000
# Healthy = a complete pass in the last minute on this boot.
HEALTH_TEST = (
    f'test "$(cat {GUARD_STATE_DIR}/ready 2>/dev/null)" = "$(cat /proc/sys/kernel/random/boot_id)" '
    f'&& test -n "$(find {GUARD_STATE_DIR}/ready -mmin -1)"'
)
# Host network namespace for the firewall, the host's PID namespace and KILL to end sandboxes at their
# limits from outside; DAC_OVERRIDE to write cgroup files owned by root of the host.
CAPABILITIES = ("NET_ADMIN", "NET_RAW", "DAC_OVERRIDE", "KILL")
# The loop devices that hold disk workspaces' filesystems: MKNOD to make a loop device's node in the guard's own /dev
# (the kernel makes new ones on the host only); block major 7 is loop. On every host, workspaces or not, so that the
# first disk workspace (or the last one gone) is a configuration the guard takes in place, not a new guard.
WORKSPACE_CAPABILITIES = ("MKNOD",)
LOOP_CONTROL = "/dev/loop-control"
LOOP_DEVICE_RULES = ("b 7:* rwm",)
MEMORY_MB = 64
CPUS = "0.5"  # enough for a pass a second over hundreds of sandboxes; bounded like everything else
# One small state file per running sandbox (its lifetime clock and idle counters).
TMPFS = {"/tmp": "rw,nosuid,nodev,noexec,size=8m"}
# Time for the stop handler: on `pulumi destroy` it removes the rules and cgroups it made.
RUN = host_role(("CMD-SHELL", HEALTH_TEST), LogRotation("1m", 2), retries=3, destroy_grace_seconds=10)


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
class GuardPlan:
    stack: str
    rules: tuple[str, ...]  # iptables rules, one a line (sandstack.plan.network)
    bridges: tuple[str, ...]  # the Linux bridges whose traffic the rules govern
    pids: tuple[tuple[str, int], ...]  # (container name, pids.max), sorted
    lifecycle: tuple[str, ...]  # lifecycle_line() of each sandbox with a limit, sorted
    workspaces: tuple[str, ...] = ()  # "volume bytes seed|empty" of each disk workspace (plan.workspace), sorted

    @property
    def capabilities(self) -> tuple[str, ...]:
        return CAPABILITIES + WORKSPACE_CAPABILITIES

    @property
    def workspaces_mount(self) -> tuple[str, str]:
        """(host directory, where the guard sees it): the stack's directory of workspace images and links."""
        return workspace_dir(self.stack), GUARD_WORKSPACES_MOUNT

    @property
    def container_name(self) -> str:
        return infra_name(self.stack, "guard")

    @property
    def run(self) -> RunSettings:
        return RUN

    @property
    def state_volume(self) -> str:
        return infra_name(self.stack, "guard-state")

    @property
    def env(self) -> list[str]:
        """What the guard is told at its start: the contract, nothing that changes with pools or sandboxes."""
        env = [
            f"SANDSTACK_STACK={self.stack}",
            f"SANDSTACK_EXIT_LIFETIME={EXIT_LIFETIME}",
            f"SANDSTACK_EXIT_IDLE={EXIT_IDLE}",
            f"SANDSTACK_GUARD_CGROUP={GUARD_CGROUP_MOUNT}",
            f"SANDSTACK_GUARD_CGROUP_ROOT={CGROUP_ROOT_NAME}",
            f"SANDSTACK_GUARD_STATE={GUARD_STATE_DIR}",
            f"SANDSTACK_CONFIG_DIR={CONFIG_DIR}",
            f"SANDSTACK_GUARD_WORKSPACES={GUARD_WORKSPACES_MOUNT}",
        ]
        return env

    @property
    def config(self) -> ConfigSet:
        """What it enforces, reloaded in place (components/assets/guard.sh `load_config`), in a fixed order."""
        return ConfigSet("guard", (
            ("SANDSTACK_RULES", "\n".join(self.rules)),
            ("SANDSTACK_PIDS", "\n".join(f"{name} {limit}" for name, limit in self.pids)),
            ("SANDSTACK_BRIDGES", " ".join(self.bridges)),
            ("SANDSTACK_LIFECYCLE", "\n".join(self.lifecycle)),
            ("SANDSTACK_WORKSPACES", "\n".join(self.workspaces)),
        ))


def plan_guard(stack: str, rules: list[str], bridges: list[str], pids: dict[str, int],
               sandboxes: list[tuple[str, ResolvedTemplate]], workspaces: list[str] = ()) -> GuardPlan:
    lines = [line for name, template in sandboxes if (line := lifecycle_line(name, template))]
    return GuardPlan(stack, tuple(rules), tuple(sorted(bridges)), tuple(sorted(pids.items())), tuple(sorted(lines)),
                     tuple(sorted(workspaces)))
