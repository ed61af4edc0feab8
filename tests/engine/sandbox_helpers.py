"""Shared pieces of the sandbox proofs (`tests/engine/test_sandbox_*.py`).

- `shared_deployment(...)`: one stack per test module, applied once through its own `Harness` and torn
  down at module end (Docker objects by the harness; the guard's host-level cgroups and firewall rules are
  checked gone too). Tests that only read share it.
- `sh(...)`: a command inside a real sandbox (`docker exec`), as its own user unless told otherwise.
- `host_cgroup(...)` / `parent_cgroup(...)`: a sandbox's cgroup directories as the host sees them.
- `wait_until(...)`: bounded polling; every wait in these tests has a deadline.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import docker as docker_sdk

from tests.engine.deploy import Deployment
from tests.engine.harness import coverage
from tests.engine.harness.harness import Harness, RunResult
from tests.engine.harness.teardown import remaining

CGROUP_ROOT = Path("/sys/fs/cgroup")
T = TypeVar("T")


@dataclass
class Shared:
    """A module's deployed stack: its harness, the deployment and the first run's result."""

    harness: Harness
    deployment: Deployment
    result: RunResult
    label: str  # what the coverage table names as having applied the fields ("<module>::<deployment>")

    def container(self, pool: str, index: int = 0):
        return self.deployment.container(pool, index)

    def proves(self, *fields: str) -> None:
        """`harness.proves(...)` for a test of this module, checked like the `docker_harness` fixture does:
        each field must have been applied to the engine by this module's deployment."""
        self.harness.proves(*fields)
        unapplied = [f for f in fields if self.label not in coverage.tests_using(f)]
        assert not unapplied, f"{self.label} never applied {unapplied} to the engine"


@contextlib.contextmanager
def shared_deployment(module_file: str, workdir: Path, spec_text: str, secret_config: dict | None = None,
                      files: dict[str, str] | None = None) -> Iterator[Shared]:
    """Deploys `spec_text` once for a whole test module and always tears it down, leaving nothing behind."""
    label = f"{Path(module_file).relative_to(Path(__file__).parents[2])}::<module deployment>"
    harness = Harness()
    deployment = Deployment(harness, workdir, secret_config=dict(secret_config or {}))
    try:
        # Field uses are recorded against PYTEST_CURRENT_TEST: name the module's deployment instead of
        # whichever test happens to set the module fixture up.
        previous = os.environ.get("PYTEST_CURRENT_TEST")
        os.environ["PYTEST_CURRENT_TEST"] = f"{label} (setup)"
        try:
            result = deployment.up(spec_text, files)
        finally:
            if previous is None:
                os.environ.pop("PYTEST_CURRENT_TEST", None)
            else:
                os.environ["PYTEST_CURRENT_TEST"] = previous
        yield Shared(harness, deployment, result, label)
    finally:
        harness.teardown()
        left = remaining(harness.backend.api, harness.session_id)
        assert not left, f"harness session {harness.session_id} left objects behind: {left}"
        assert_host_clean(deployment.stack)


def assert_host_clean(stack: str, timeout: float = 15) -> None:
    """The guard removes its cgroup parents and firewall rules once its stack's networks are gone."""
    prefix = f"sandstack-{stack}-"

    def leftovers() -> list[str]:
        dirs = [str(p) for p in CGROUP_ROOT.glob(f"*/sandstack/{prefix}*")]
        rules = subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True).stdout
        tagged = [line for line in rules.splitlines() if f'"sandstack:{stack}"' in line]
        return dirs + tagged

    left = wait_until(lambda: not leftovers(), timeout, what=f"host cleanup of stack {stack}", check=False)
    assert left, f"stack {stack} left host state behind: {leftovers()}"


def sh(container, script: str, user: str | None = None, timeout: float = 60) -> tuple[int, str]:
    """Runs `sh -c script` inside the sandbox (as its own user unless `user`); returns (exit code, output).

    `timeout` bounds the call via coreutils/busybox `timeout` in the sandbox, so a hung probe cannot
    hang the suite."""
    cmd = ["timeout", str(int(timeout)), "sh", "-c", script]
    result = container.exec_run(cmd, user=user or "", demux=False)
    return result.exit_code, result.output.decode(errors="replace")


def python(container, code: str, user: str | None = None, timeout: float = 60) -> tuple[int, str]:
    """Runs python3 code inside a Debian-based sandbox; returns (exit code, output)."""
    result = container.exec_run(["timeout", str(int(timeout)), "python3", "-c", code], user=user or "")
    return result.exit_code, result.output.decode(errors="replace")


def _controller_mount(controller: str) -> Path:
    """The host's cgroup v1 mount holding `controller` (`cpu` and `cpuacct` may be joint or apart)."""
    direct = CGROUP_ROOT / controller
    if direct.is_dir():
        return direct
    for candidate in CGROUP_ROOT.iterdir():
        if controller in candidate.name.split(","):
            return candidate
    raise AssertionError(f"no cgroup v1 mount for controller {controller!r} under {CGROUP_ROOT}")


def host_cgroup(container, controller: str) -> Path:
    """The sandbox container's own cgroup directory for `controller`, as the host sees it."""
    container.reload()
    pid = container.attrs["State"]["Pid"]
    assert pid, f"{container.name} is not running"
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return _controller_mount(controller) / path.lstrip("/")
    raise AssertionError(f"{container.name}: no {controller} cgroup in /proc/{pid}/cgroup")


def parent_cgroup(container, controller: str) -> Path:
    """The sandbox's cgroup parent (`/sandstack/<container name>`), whose limits the host guard writes."""
    return _controller_mount(controller) / "sandstack" / container.name


def read_int(path: Path) -> int:
    return int(path.read_text().split()[0])


def read_keyed(path: Path) -> dict[str, int]:
    """A cgroup `key value` file (memory.oom_control, cpu.stat, pids.events) as a dict."""
    return {k: int(v) for k, v in (line.split() for line in path.read_text().splitlines() if line.strip())}


def wait_until(predicate: Callable[[], T], timeout: float, interval: float = 0.25, what: str = "condition",
               check: bool = True) -> T:
    """Polls `predicate` until it returns something truthy or `timeout` seconds pass.

    Returns the truthy value; on timeout raises AssertionError naming `what` (or returns the last value
    with check=False)."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = predicate()
    if not value and check:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")
    return value


def state(container) -> dict:
    container.reload()
    return container.attrs["State"]


def client() -> docker_sdk.DockerClient:
    return docker_sdk.from_env(timeout=120)
