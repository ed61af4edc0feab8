"""Resource limits, their named profiles, and sandbox lifecycle."""

from __future__ import annotations

from typing import Literal

from sandstack.spec.models.base import Cpus, Duration, Name, Size, StrictModel, field
from sandstack.spec.models.hosts import GpuType

# Built-in limits for anything neither a profile, the stack defaults nor the template set.
# Small on purpose: a sandbox must ask for more, never get more by accident.
BUILTIN_LIMITS = {"cpus": 1.0, "memory": 512 * 1024**2, "disk": 1024**3, "pids": 256}


class GpuRequest(StrictModel):
    count: int = field(description="Number of GPUs each sandbox gets.", change="replace", ge=1, le=16)
    type: GpuType | None = field(
        None, description="GPU model the host must have (see `hosts.*.capacity.gpus`); any type when unset.",
        change="replace",
    )


class Limits(StrictModel):
    """Resource limits of one sandbox. Unset fields come from the profile, then `defaults`, then built-ins
    (1 CPU, 512MiB memory, 1GiB disk, 256 processes, no GPU)."""

    cpus: Cpus | None = field(
        None, description="CPU time the sandbox may use, in CPUs (1.5 = one and a half cores).", change="replace"
    )
    memory: Size | None = field(
        None,
        description=(
            "Memory limit in whole MiB (at least 6MiB); the sandbox gets no swap beyond it and is OOM-killed "
            "past it. Files in writable paths (tmpfs) count against it."
        ),
        change="in-place",
    )
    disk: Size | None = field(
        None,
        description=(
            "Disk the sandbox may write: the sum of its writable paths' sizes must fit, and with a host "
            "`storage_quota` it also caps a writable root."
        ),
        change="replace",
    )
    pids: int | None = field(
        None, description="Maximum number of processes and threads inside the sandbox (fork-bomb guard).",
        change="replace", ge=8, le=65536,
    )
    gpus: GpuRequest | None = field(None, description="GPUs attached to each sandbox. Default none.", change="replace")


class LimitsOverride(Limits):
    """A profile by name plus single fields overriding it, e.g. `{profile: small, memory: 2GiB}`."""

    profile: Name | None = field(None, description="Name of a profile in `profiles` to start from.", change="replace")


class Lifecycle(StrictModel):
    """How long a sandbox lives. Enforced inside the sandbox by sandstack's supervisor (PID 1), which
    stops the sandbox's processes when a limit is reached."""

    max_lifetime: Duration | None = field(
        None,
        description="Longest time a sandbox runs after it starts, e.g. '24h'. Default 24h.",
        change="replace",
    )
    idle_timeout: Duration | None = field(
        None,
        description=(
            "Stop a sandbox whose processes used no CPU for this long, e.g. '30m'. Default: never."
        ),
        change="replace",
    )
    on_expiry: Literal["stop", "restart"] | None = field(
        None,
        description=(
            "What happens at a limit: 'stop' (default) leaves the container stopped; 'restart' starts it "
            "again with fresh writable paths, keeping a warm pool full."
        ),
        change="replace",
    )
