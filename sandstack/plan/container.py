"""How a sandstack container is kept running, beside what it runs: its restart policy, its health check, how long
`pulumi up` waits for it to be healthy, how long a stop may take, and how its logs are rotated.

Each role's plan (guard, gateway, logger, ingress, runtime, sandbox) carries one `RunSettings` as `run`; the
components copy it into their container and decide none of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

# A host role runs until it is stopped: it is what keeps the host closed, its sandboxes' way out or its API.
ALWAYS = "unless-stopped"


@dataclass(frozen=True)
class Healthcheck:
    tests: tuple[str, ...]
    interval: str
    timeout: str
    retries: int
    start_period: str


@dataclass(frozen=True)
class LogRotation:
    """Docker's own log files, bounded: a chatty container cannot fill the host's disk."""

    max_size: str
    max_files: int
    driver: ClassVar[str] = "json-file"

    @property
    def opts(self) -> dict[str, str]:
        return {"max-size": self.max_size, "max-file": str(self.max_files)}


@dataclass(frozen=True)
class RunSettings:
    healthcheck: Healthcheck | None
    wait_timeout: int | None  # seconds `pulumi up` waits for the health check to pass
    logs: LogRotation
    restart: str = ALWAYS
    max_retry_count: int | None = None  # with restart 'on-failure' only
    destroy_grace_seconds: int | None = None  # time for a stop handler; None: Docker's default
    # False for a service that is healthy only once configured: its reload container waits for it instead.
    wait_for_health: bool = True

    @property
    def wait(self) -> bool:
        """`pulumi up` waits for health only where there is a health check to wait for."""
        return self.healthcheck is not None and self.wait_for_health


def host_role(tests: tuple[str, ...], logs: LogRotation, *, retries: int = 5, timeout: str = "2s",
              start_period: str = "1s", wait_timeout: int = 60, destroy_grace_seconds: int | None = None,
              wait: bool = True) -> RunSettings:
    """A host role's settings: probed every 2 s, so a host is ready within seconds of its last container."""
    return RunSettings(Healthcheck(tests, "2s", timeout, retries, start_period), wait_timeout if wait else None, logs,
                       destroy_grace_seconds=destroy_grace_seconds, wait_for_health=wait)
