"""Resource limits, their named profiles, and sandbox lifecycle."""

from __future__ import annotations

from typing import Literal

from sandstack.spec.access import AS_RESOLVED, NEVER, capacity, loosens
from sandstack.spec.changes import (BUILTIN_TMPFS, GUARD, IN_PLACE_AND_GUARD, REPLACE, REPLACE_AND_GUARD, WRITABLE_ROOT,
                                     Effect)
# The lifecycle contract the host guard and the sandbox container implement; the field descriptions below
# quote these numbers, so the reference and the enforcement cannot drift apart.
from sandstack.spec.contract import CRASH_RETRIES, EXIT_IDLE, EXIT_LIFETIME, IDLE_CPU_MS_PER_S
from sandstack.spec.models.base import Cpus, Duration, Name, Size, StrictModel, field
from sandstack.spec.models.hosts import GpuType
from sandstack.spec.units import GIB, MIB

# Built-in limits for anything neither a profile, the stack defaults nor the template set.
# Small on purpose: a sandbox must ask for more, never get more by accident.
BUILTIN_LIMITS = {"cpus": 1.0, "memory": 512 * MIB, "disk": GIB, "pids": 256, "open_files": 1024}

# Memory a sandbox keeps for its processes with every writable path and /dev/shm full (rule writable-memory):
# enough for docker-init, the supervisor and one more process (a `docker exec` of a shell or python3 takes
# runc's init plus ~10MiB), so a sandbox that filled its tmpfs can still be entered and cleaned up instead of
# having every new process OOM-killed.
PROCESS_HEADROOM = 32 * MIB


def process_headroom(memory: int) -> int:
    """What writable paths and /dev/shm must leave of `memory`: PROCESS_HEADROOM, or half of a smaller limit
    (a 16MiB busybox sandbox runs in a few MiB)."""
    return min(PROCESS_HEADROOM, memory // 2)


class GpuRequest(StrictModel):
    count: int = field(description="Number of GPUs each sandbox gets.", change="replace",
                       access=loosens("limits", "raised", 1, 2), ge=1, le=16)
    type: GpuType | None = field(
        None,
        description=(
            "GPU model the host must have (see `hosts.*.capacity.gpus`); any type when unset. The sandbox gets "
            "`count` devices of that model by id, so a change replaces it."
        ),
        change="replace",
        access=NEVER,
    )


class Limits(StrictModel):
    """Resource limits of one sandbox. Unset fields come from the profile, then `defaults`, then built-ins
    (1 CPU, 512MiB memory, 1GiB disk, 256 processes, 1024 open files per process, no GPU)."""

    cpus: Cpus | None = field(
        None, description="CPU time the sandbox may use, in CPUs (1.5 = one and a half cores).", change="replace",
        access=capacity("raised: more of the host's CPU time")
    )
    memory: Size | None = field(
        None,
        description=(
            "Memory limit in whole MiB (at least 6MiB); the sandbox gets no swap beyond it and is OOM-killed "
            "past it. Files in writable paths and /dev/shm (tmpfs) count against it, so their sizes must leave "
            f"at least {PROCESS_HEADROOM // MIB}MiB (or half of a smaller limit) of it for processes. "
            "A change applies in place, except under 256MiB for a template on the built-in /tmp or /dev/shm "
            "sizes, which follow the limit: their new sizes replace the sandboxes."
        ),
        change=Effect(sandboxes="update", label_text="in-place", when=(
            (BUILTIN_TMPFS, Effect(sandboxes="replace", forces=("tmpfs",))),)),
        access=capacity("raised: more of the host's memory"),
    )
    disk: Size | None = field(
        None,
        description=(
            "Disk the sandbox may write: the sum of its writable paths' sizes must fit, and with a host "
            "`storage_quota` it also caps a writable root. With the read-only root (the default) a change is "
            "checked, not applied."
        ),
        change=Effect(when=((WRITABLE_ROOT, REPLACE),)),
        access=capacity("raised: more of the host's disk"),
    )
    pids: int | None = field(
        None,
        description=(
            "Maximum number of processes and threads inside the sandbox (fork-bomb guard). The host guard "
            "writes it into each sandbox's cgroup, so a change renews the guard, not the sandboxes."
        ),
        change=GUARD,
        access=loosens("limits", "raised", 100, 200), ge=8, le=65536,
    )
    open_files: int | None = field(
        None,
        description=(
            "Most files, sockets and pipes each process of the sandbox may hold open (its nofile ulimit, soft "
            "and hard alike, which it cannot raise). With `pids` it bounds the connections a sandbox can hold "
            "open, at most about pids × open_files. Default 1024."
        ),
        change="replace",
        access=loosens("limits", "raised", 1024, 4096), ge=64, le=1048576,
    )
    gpus: GpuRequest | None = field(None, description="GPUs attached to each sandbox. Default none.", change="replace",
                                    access=loosens("limits", "GPUs requested, or more of them", None, {"count": 1}))


# A size class is applied by the runtime at claim time (sandstack.runtime.sizes): its configuration carries every
# class; the guard holds each sandbox's cgroup parent at the pool's largest pids (a claim's own limit sits under it).
SIZE_RUNTIME = Effect(host=frozenset({"runtime"}))
SIZE_PIDS = Effect(host=frozenset({"guard", "runtime"}))


class SizeClass(StrictModel):
    """One size class of a pool: the limits a claim naming it gets (docs/design/sizes.md). An unset field is the
    pool's own limit (its template's), which is also what a claim that names no class gets."""

    cpus: Cpus | None = field(
        None, description="CPU time a sandbox of this class may use, in CPUs. Applied to a warm sandbox at claim and "
                          "restored at its release, so a change reloads the runtime's configuration only.",
        change=SIZE_RUNTIME, access=capacity("raised: a claim of the class takes more of the host's CPU time"))
    memory: Size | None = field(
        None, description="Memory limit of a sandbox of this class (no swap beyond it), at least what the template's "
                          "writable paths, /dev/shm and its processes need (rule size-memory). Applied at claim, "
                          "restored at release.",
        change=SIZE_RUNTIME, access=capacity("raised: a claim of the class takes more of the host's memory"))
    disk: Size | None = field(
        None, description="Disk a sandbox of this class may write, at least the template's writable paths (rule "
                          "size-disk). A running sandbox's disk cannot change: a class whose disk differs from the "
                          "pool's is served only by a sandbox created on demand for the claim (the pool needs `max` "
                          "above `replicas`, rule size-disk).",
        change=SIZE_RUNTIME, access=capacity("raised: a claim of the class takes more of the host's disk"))
    pids: int | None = field(
        None, description="Most processes and threads of a sandbox of this class. The runtime sets it on the "
                          "sandbox's own cgroup at claim; the host guard holds the sandbox's parent cgroup at the "
                          "pool's largest pids, so a change renews the guard too.",
        change=SIZE_PIDS, access=loosens("limits", "raised", 100, 200), ge=8, le=65536)


class LimitsOverride(Limits):
    """A profile by name plus single fields overriding it, e.g. `{profile: small, memory: 2GiB}`."""

    profile: Name | None = field(None, description="Name of a profile in `profiles` to start from.",
                                 change=REPLACE_AND_GUARD,
                                 access=AS_RESOLVED)


class Lifecycle(StrictModel):
    """How long a sandbox lives. Enforced from outside the sandbox by the host guard: at a limit it kills every
    process of the sandbox, and nothing inside the sandbox can stop, trace or outlive it."""

    max_lifetime: Duration | None = field(
        None,
        description=(
            "Longest time a sandbox runs, counted from its first start, e.g. '24h'. Default 24h. With "
            "`on_expiry: stop`, restarts after a crash do not reset the clock. Enforced by the host guard: a "
            "change renews the guard, not the sandboxes."
        ),
        change=GUARD,
        access=loosens("lifetime", "raised or removed", "1h", "8h"),
    )
    idle_timeout: Duration | None = field(
        None,
        description=(
            f"How long a sandbox may stay idle, e.g. '30m': idle means its processes used less than "
            f"{IDLE_CPU_MS_PER_S} ms of CPU per second (readiness probes excluded). Default: never. Enforced by "
            "the host guard: a change renews the guard, not the sandboxes."
        ),
        change=GUARD,
        access=loosens("lifetime", "raised or removed", "30m", "2h"),
    )
    on_expiry: Literal["stop", "restart"] | None = field(
        None,
        description=(
            f"What happens at a limit. 'stop' (default): the sandbox stops for good, with exit status "
            f"{EXIT_LIFETIME} (max lifetime reached) or {EXIT_IDLE} (idle timeout reached); a crash keeps the "
            f"command's own exit status and is restarted at most {CRASH_RETRIES} times (Docker's "
            f"on-failure:{CRASH_RETRIES}), then stays stopped. 'restart': at a limit the sandbox starts again "
            "with fresh writable paths and a fresh clock, keeping a warm pool full. The restart policy changes in place; the guard's lifecycle "
            "lines are renewed."
        ),
        change=IN_PLACE_AND_GUARD,
        access=NEVER,
    )
