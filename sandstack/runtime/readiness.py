"""Waiting for a started sandbox to be ready: running, and its readiness probe passing.

Docker runs a container's first health check one probe interval after the start (1 s for a 1 s interval; the
engine here, 20.10, has no `start_interval`), so a sandbox whose service is up in 100 ms is `starting` for a
second. While Docker says `starting`, the runtime runs the probe itself: the same command Docker holds for the
container (its `Config.Healthcheck.Test`, which the plan wrote from the template's readiness probe), in the
container as Docker's check runs it (the container's own user, environment and working directory), bounded by the
probe's timeout. Its exit 0 is as good as Docker's `healthy`: the same command said the service is up. Anything
else (a failure, a timeout, an exec Docker refuses while the container is still starting) is not an answer; the
wait goes on, and Docker's own checks still decide `unhealthy`. Nothing is handed back before the probe passed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from sandstack.plan.runtime import PoolRuntime
from sandstack.runtime.backend import BackendError, CappedBuffer, SandboxBackend

POLL = 0.05  # seconds between looks at Docker's state
PROBE_EVERY = 0.1  # seconds between the runtime's own runs of the probe while Docker says 'starting'
STARTING = ("running", "created", "restarting")
RESUME_WAIT = 120  # seconds a warm sandbox started again (a resume, a restore) may take to be ready


@dataclass(frozen=True)
class Probe:
    argv: list[str]
    workdir: str
    timeout: float


def probe_of(healthcheck: dict[str, Any] | None, workdir: str | None) -> Probe | None:
    """The argv of Docker's health check (`["CMD", ...]` or `["CMD-SHELL", "..."]`), None for none or NONE."""
    test = list((healthcheck or {}).get("Test") or [])
    if not test or test[0] == "NONE":
        return None
    argv = test[1:] if test[0] == "CMD" else ["/bin/sh", "-c", test[1]] if test[0] == "CMD-SHELL" else None
    if not argv:
        return None
    timeout = (healthcheck.get("Timeout") or 30_000_000_000) / 1e9  # Docker's default: 30 s
    return Probe(argv, workdir or "/", timeout)


class Health(Protocol):
    """What the wait reads of a container beside the backend (sandstack.runtime.ondemand's Provisioner)."""

    def health(self, name: str) -> tuple[str, str | None]:
        """(Docker's status, its health check's status or None when it has none)."""

    def probe(self, name: str) -> Probe | None:
        """Its readiness probe as Docker holds it, None when it has none."""


def passes(backend: SandboxBackend, name: str, probe: Probe) -> bool:
    """The probe run once in the container: True on exit 0 within its timeout."""
    try:
        status = backend.exec(name, probe.argv, workdir=probe.workdir, stdout=CappedBuffer(4096),
                              stderr=CappedBuffer(4096), timeout=probe.timeout)
    except BackendError:
        return False  # not running yet, or gone: Docker's state says which at the next look
    return status.exit_code == 0


def wait_ready(provisioner: Health, backend: SandboxBackend, name: str, wait_seconds: float, *,
               fail_unhealthy: bool = True, probe: Probe | None = None) -> None:
    """Return once the container runs and is healthy (by Docker's check or its probe run here); BackendError
    when it stops, turns unhealthy (`fail_unhealthy`) or is not ready within `wait_seconds`. `probe`: the one the
    caller just created the container with, run at once, before Docker is asked anything (its exit 0 says the
    container runs and its service is up: two inspects fewer per creation on a busy daemon)."""
    deadline = time.monotonic() + wait_seconds
    probed_at = 0.0
    if probe is not None:
        probed_at = time.monotonic()
        if passes(backend, name, probe):
            return
    while True:
        status, health = provisioner.health(name)
        if status == "running" and health in (None, "healthy"):
            return
        if status not in STARTING or (fail_unhealthy and health == "unhealthy"):
            raise BackendError(f"container {name!r} is {status}" + (f" ({health})" if health else ""))
        if status == "running" and health == "starting" and time.monotonic() - probed_at >= PROBE_EVERY:
            probe = probe or provisioner.probe(name)
            probed_at = time.monotonic()
            if probe is not None and passes(backend, name, probe):
                return
        if time.monotonic() > deadline:
            raise BackendError(f"container {name!r} was not ready within {wait_seconds:g}s")
        time.sleep(POLL)


class Readiness:
    """The waits of the runtime's own starts: a new on-demand sandbox's (`ready`), and a warm or on-demand sandbox
    started again by a resume or a restore (`started`)."""

    def __init__(self, health: Health | None, backend: SandboxBackend):
        self.health, self.backend = health, backend

    def ready(self, name: str, wait_seconds: float, probe: Probe | None = None) -> None:
        """A new sandbox: running and healthy, unhealthy is final (wait_ready); `probe`: the one it was created
        with (else read from Docker when the wait needs it)."""
        if self.health is None:
            raise BackendError(f"container {name!r}: this runtime cannot read Docker's health checks")
        wait_ready(self.health, self.backend, name, wait_seconds, probe=probe)

    def started(self, name: str, spec: PoolRuntime) -> None:
        """Running, and healthy where the template has a readiness probe: as a new sandbox is handed out (the probe
        is run here as soon as the container runs). Unhealthy is not final here: Docker's retries may still see the
        service come up within the wait."""
        wait = spec.ondemand.wait_seconds if spec.ondemand else RESUME_WAIT
        if self.health is not None:
            wait_ready(self.health, self.backend, name, wait, fail_unhealthy=False)
            return
        deadline = time.monotonic() + wait
        while (status := self.backend.state(name).status) != "running":
            if status not in STARTING or time.monotonic() > deadline:
                raise BackendError(f"container {name!r} did not come back ({status})")
            time.sleep(POLL)
