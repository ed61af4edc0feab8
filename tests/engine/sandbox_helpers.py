"""Shared pieces of the sandbox proofs (`tests/engine/test_sandbox_*.py`).

The module's stack comes from `deploy.shared_deployment(...)`, bounded waits from `waiting.wait_until(...)`.

- `sh(...)`: a command inside a real sandbox (`docker exec`), as its own user unless told otherwise.
- `host_cgroup(...)` / `parent_cgroup(...)`: a sandbox's cgroup directories as the host sees them.
- `ended(...)` / `guard_expiry(...)`: a sandbox that stopped for good, and the host guard's own record of
  ending it (why, and when by the guard's clock).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import docker as docker_sdk

from testbed.host_state import CGROUP_ROOT
from testbed.waiting import wait_until


def sh(container, script: str, user: str | None = None, timeout: float = 60) -> tuple[int, str]:
    """Runs `sh -c script` inside the sandbox (as its own user unless `user`); returns (exit code, output).

    `timeout` bounds the call via coreutils/busybox `timeout` in the sandbox, so a hung probe cannot
    hang the suite."""
    cmd = ["timeout", str(int(timeout)), "sh", "-c", script]
    result = container.exec_run(cmd, user=user or "", demux=False)
    return result.exit_code, result.output.decode(errors="replace")


def sh_in_a_run(container, script: str, deadline: float = 60) -> tuple[int, str]:
    """`sh(...)` in whichever run of a restarting sandbox is up: Docker refuses an exec (409) while a run ends
    and the next starts, so it is tried again (until `deadline`, a bound on waiting only)."""
    def attempt():
        try:
            return sh(container, script)
        except docker_sdk.errors.APIError as error:
            if error.status_code != 409:
                raise
            return None

    return wait_until(attempt, deadline, interval=0.5, what=f"a run of {container.name} to exec in")


def python(container, code: str, user: str | None = None, timeout: float = 60) -> tuple[int, str]:
    """Runs python3 code inside a Debian-based sandbox; returns (exit code, output)."""
    result = container.exec_run(["timeout", str(int(timeout)), "python3", "-c", code], user=user or "")
    return result.exit_code, result.output.decode(errors="replace")


# Python prelude for probes run with `python(...)`: `attempt(name, call)` prints "<name> ok" or
# "<name> <errno name>", so one exec can try several operations and report each.
ATTEMPT = (
    "import errno, os, socket\n"
    "def attempt(name, call):\n"
    "    try:\n"
    "        call()\n"
    "        print(name, 'ok')\n"
    "    except OSError as e:\n"
    "        print(name, errno.errorcode[e.errno])\n"
)


# Python for `python3 -c FILL PATH`: writes PATH in 64 KiB chunks up to 64 MiB, then prints "no-limit N",
# or the errno name and how much was written when a write fails (ENOSPC at a size bound); removes PATH.
FILL = (
    "import errno, os, sys\n"
    "path = sys.argv[1]\n"
    "written = 0\n"
    "chunk = b'\\1' * 65536\n"
    "try:\n"
    "    with open(path, 'wb', buffering=0) as f:\n"
    "        while written < 64 << 20:\n"
    "            written += f.write(chunk)\n"
    "    print('no-limit', written)\n"
    "except OSError as e:\n"
    "    print(errno.errorcode[e.errno], os.path.getsize(path))\n"
    "finally:\n"
    "    os.remove(path)\n"
)


def ended(container, within: float = 120) -> dict:
    """The container's state once Docker has stopped retrying it (exited, and still exited 2 s later), with
    `lived` (seconds from its creation to its last exit) and `restarts` added. `within` only bounds the wait
    (generously by default: a busy machine is slow, not wrong); when it ended and why is the guard's record."""
    def still_exited():
        first = state(container)
        if first["Status"] != "exited":
            return None
        time.sleep(2)
        second = state(container)
        return second if second["Status"] == "exited" and second["FinishedAt"] == first["FinishedAt"] else None

    final = wait_until(still_exited, within, what=f"{container.name} to end for good")
    container.reload()
    final["lived"] = docker_time(final["FinishedAt"]) - docker_time(container.attrs["Created"])
    final["restarts"] = container.attrs["RestartCount"]
    return final


# The host guard's log line when it ends a sandbox (components/assets/guard.sh, `expire`), with its record by
# its own clock (epoch seconds): see docs/design/lifecycle.md.
GUARD_RECORD = re.compile(
    r"sandstack-guard: sandbox (?P<name>\S+) \((?P<id>[0-9a-f]{12})\): (?P<reason>max lifetime|idle timeout) of "
    r"(?P<limit>\d+)s reached; stopping it \(exit (?P<exit>\d+)\) "
    r"\[since=(?P<since>\d+) checked=(?P<checked>\d+|-) now=(?P<now>\d+)\]$")


@dataclass(frozen=True)
class GuardExpiry:
    """One record of the guard ending a sandbox: `since` (the limit's clock started: the sandbox's start, or
    its last activity for an idle timeout), `checked` (its previous look at the sandbox; None: never), `now`."""
    reason: str
    limit: int
    exit: int
    since: int
    checked: int | None
    now: int


def guard_expiries(deployment, container) -> list[GuardExpiry]:
    """The guard's records of ending `container` (this container: its name and id), oldest first."""
    guard = client().containers.get(deployment.name("guard"))
    lines = guard.logs(stdout=True, stderr=True).decode(errors="replace").splitlines()
    found = []
    for match in filter(None, map(GUARD_RECORD.match, lines)):
        if match["name"] == container.name and container.id.startswith(match["id"]):
            found.append(GuardExpiry(match["reason"], int(match["limit"]), int(match["exit"]), int(match["since"]),
                                     None if match["checked"] == "-" else int(match["checked"]), int(match["now"])))
    return found


def guard_expiry(deployment, container, reason: str, limit: int, exit_code: int) -> GuardExpiry:
    """The guard's first record of ending `container`, checked to be for `reason` at `limit` seconds with
    `exit_code`, and to say that the guard acted at its first check at or past the limit: never before it
    (`now` - `since` >= limit), and its previous check was still short of it. This is the cause and the time
    of the end by the guard's own clock, whatever else the machine was busy with."""
    records = guard_expiries(deployment, container)
    assert records, f"the host guard recorded no expiry of {container.name}"
    first = records[0]
    assert (first.reason, first.limit, first.exit) == (reason, limit, exit_code), first
    assert first.now - first.since >= limit, f"the guard acted before the limit: {first}"
    assert first.checked is None or first.checked - first.since < limit, \
        f"the guard had already seen the limit passed and did not act: {first}"
    return first


def docker_time(rfc3339: str) -> float:
    """Seconds since the epoch of a Docker timestamp (nanoseconds cut to microseconds)."""
    return datetime.fromisoformat(rfc3339[:26].rstrip("Z") + "+00:00").timestamp()


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


def state(container) -> dict:
    container.reload()
    return container.attrs["State"]


def client() -> docker_sdk.DockerClient:
    return docker_sdk.from_env(timeout=120)
