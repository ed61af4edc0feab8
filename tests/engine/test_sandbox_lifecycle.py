"""Lifecycle of real sandboxes: max lifetime (stop / restart), idle timeout, and the supervisor waiting for
the host guard.

The host guard enforces `max_lifetime` and `idle_timeout` from outside the sandbox (components/assets/
guard.sh): at a limit it kills every process of the sandbox but its supervisor, which then exits 124
(lifetime) or 123 (idle); the restart policy chosen from `on_expiry` decides what follows. The attacks
that defeated the old in-sandbox supervisor are in test_sandbox_lifecycle_attacks.py. All pools start
together when the module's stack is deployed, so their short timeouts run down in parallel. An end is proved by
its cause (the exit status and the guard's own record, `guard_expiry`), never by wall-clock bounds; every wait
has a generous deadline, which only keeps a broken run from hanging.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from sandstack.plan.naming import infra_name
from testbed.deploy import engine_spec, shared_deployment
from sandstack.spec.contract import EXIT_IDLE, EXIT_LIFETIME
from tests.engine.sandbox_helpers import (client, docker_time, ended, guard_expiries, guard_expiry, sh, sh_in_a_run,
                                          state)
from testbed.waiting import wait_until

pytestmark = pytest.mark.docker

LIFETIME = 5
IDLE = 4
DEADLINE = 90  # seconds a wait for the guard gives up after: generous, so that a busy machine is only slow
SLEEPER = ["sleep", "100000"]


@pytest.fixture(scope="module")
def stack(debian_image, busybox_image, harness_sweep_orphans, tmp_path_factory):
    small = {"memory": "16MiB"}
    templates = {
        "expire": {"base_image": busybox_image, "command": SLEEPER, "limits": small,
                   "lifecycle": {"max_lifetime": f"{LIFETIME}s", "on_expiry": "stop"}},
        "renew": {"base_image": busybox_image, "command": SLEEPER, "limits": small,
                  "lifecycle": {"max_lifetime": f"{LIFETIME}s", "on_expiry": "restart"}},
        "idle": {"base_image": busybox_image, "command": SLEEPER, "limits": small,
                 "lifecycle": {"idle_timeout": f"{IDLE}s"}},
        # Busy at a tenth of a CPU: far above the supervisor's idle threshold (20 ms of CPU per second),
        # far below what would slow the other tests down.
        "busy": {"base_image": busybox_image, "command": ["sh", "-c", "while :; do :; done"],
                 "limits": {**small, "cpus": 0.1}, "lifecycle": {"idle_timeout": f"{IDLE}s"}},
    }
    spec = engine_spec(debian_image, templates)
    with shared_deployment(__file__, tmp_path_factory.mktemp("lifecycle"), spec) as shared:
        yield shared


@pytest.fixture(scope="module")
def gated(debian_image, busybox_image, harness_sweep_orphans, tmp_path_factory):
    """A stack of its own (so its own guard): a sandbox whose command records when it started."""
    templates = {"gated": {"base_image": busybox_image, "limits": {"memory": "16MiB"},
                           "command": ["sh", "-c", "date +%s > /tmp/started; exec sleep 100000"]}}
    spec = engine_spec(debian_image, templates)
    with shared_deployment(__file__, tmp_path_factory.mktemp("gated"), spec) as shared:
        yield shared


def _logs(container) -> str:
    return container.logs(stdout=True, stderr=True).decode(errors="replace")


def test_sandbox_past_its_max_lifetime_is_stopped_and_stays_stopped(stack):
    stack.proves("Container.entrypoints", "Container.init", "Container.restart")
    sandbox = stack.container("expire")
    final = ended(sandbox, DEADLINE)
    # Stopped by the guard at the limit (its record: at its first check at or past LIFETIME seconds from the
    # sandbox's start), with the lifetime's own status.
    assert final["ExitCode"] == EXIT_LIFETIME and not final["OOMKilled"], final
    guard_expiry(stack, sandbox, "max lifetime", LIFETIME, EXIT_LIFETIME)
    sandbox.reload()
    assert "max lifetime reached; stopping the sandbox (exit 124)" in _logs(sandbox)
    # on_expiry: stop → it stays stopped: Docker's bounded crash retries each end with 124 again, each for a
    # recorded cause: its supervisor found the guard's marker ("it stays stopped"), or, on a busy machine
    # where the guard's next pass came first, the guard ended that run again (its clock is the first run's).
    assert sandbox.attrs["HostConfig"]["RestartPolicy"] == {"Name": "on-failure", "MaximumRetryCount": 3}
    assert sandbox.attrs["RestartCount"] <= 3
    again = guard_expiries(stack, sandbox)[1:]
    assert all(r.reason == "max lifetime" and r.exit == EXIT_LIFETIME for r in again), again
    assert _logs(sandbox).count("it stays stopped") + len(again) >= sandbox.attrs["RestartCount"], again
    time.sleep(3)
    assert state(sandbox)["Status"] == "exited"


def test_sandbox_with_on_expiry_restart_comes_back_with_fresh_writable_paths(stack):
    stack.proves("Container.entrypoints", "Container.restart", "Container.tmpfs")
    sandbox = stack.container("renew")
    # Leave a file in the writable /tmp of one run of the sandbox (retried if a restart races the write).
    for _ in range(10):
        first = wait_until(lambda: (lambda s: s["StartedAt"] if s["Running"] else None)(state(sandbox)),
                           DEADLINE, what="the renewing sandbox to run")
        code, out = sh_in_a_run(sandbox, "echo left-behind > /tmp/leftover && cat /tmp/leftover")
        if code == 0 and state(sandbox)["StartedAt"] == first:
            break
    else:
        pytest.fail("could not write into one run of the sandbox")
    assert out == "left-behind\n"
    # The lifetime runs out, the sandbox exits 124 and the restart policy starts a fresh run.
    wait_until(lambda: (lambda s: s["Running"] and s["StartedAt"] != first)(state(sandbox)),
               DEADLINE, what="the sandbox to come back after its max lifetime")
    sandbox.reload()
    assert sandbox.attrs["RestartCount"] >= 1
    # Ended by the guard at its lifetime (each run has a fresh clock: 'restart').
    guard_expiry(stack, sandbox, "max lifetime", LIFETIME, EXIT_LIFETIME)
    assert sandbox.attrs["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert "max lifetime reached; stopping the sandbox (exit 124)" in _logs(sandbox)
    code, out = sh_in_a_run(sandbox, "ls -A /tmp; test ! -e /tmp/leftover")
    assert code == 0, f"/tmp was not fresh after the restart: {out!r}"


def test_idle_timeout_stops_an_idle_sandbox_and_not_a_busy_one(stack):
    stack.proves("Container.entrypoints", "Container.restart")
    idle, busy = stack.container("idle"), stack.container("busy")
    busy_started = state(busy)["StartedAt"]
    final = ended(idle, DEADLINE)
    assert final["ExitCode"] == EXIT_IDLE, final
    record = guard_expiry(stack, idle, "idle timeout", IDLE, EXIT_IDLE)
    assert "idle timeout reached; stopping the sandbox (exit 123)" in _logs(idle)
    # The busy one, started at the same moment with the same timeout, runs on past the point where the
    # idle one was stopped, by more than the timeout again (on the guard's clock: the guard's idle check
    # is what could stop it).
    stopped_at = docker_time(final["FinishedAt"])
    wait_until(lambda: time.time() > max(stopped_at, record.now) + IDLE + 2, DEADLINE, what="one more idle period")
    now = state(busy)
    assert now["Running"] and now["StartedAt"] == busy_started, now  # the same run, never stopped
    busy.reload()
    assert busy.attrs["RestartCount"] == 0
    assert "idle timeout" not in _logs(busy)
    assert guard_expiries(stack, busy) == []


def test_sandbox_command_waits_for_the_guard_marker_of_this_boot(gated):
    gated.proves("Container.entrypoints", "Container.mounts", "Container.mounts.readOnly")
    docker = client()
    stack = gated.deployment.stack
    sandbox = gated.container("gated")
    guard = docker.containers.get(infra_name(stack, "guard"))
    marker = Path(docker.api.inspect_volume(infra_name(stack, "guard-state"))["Mountpoint"]) / "ready"
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    wait_until(lambda: sh(sandbox, "test -s /tmp/started")[0] == 0, DEADLINE, what="the first start of the command")
    assert marker.read_text().strip() == boot_id

    def command_started() -> bool:
        code, out = sh(sandbox, "test -s /tmp/started && ps -o args | grep -q '^sleep 100000'")
        return code == 0

    try:
        # Stop the guard (it leaves its rules in place while the stack's bridges exist) and take its marker away.
        guard.stop(timeout=10)
        marker.unlink()
        sandbox.restart(timeout=5)
        wait_until(lambda: "waiting for the host guard" in _logs(sandbox), DEADLINE, what="the supervisor to wait")
        time.sleep(3)
        assert not command_started(), "the command ran with no guard marker"
        # A marker from another boot (as after a reboot before the guard ran) does not count either.
        marker.write_text(str(uuid.uuid4()) + "\n")
        time.sleep(3)
        assert not command_started(), "the command ran with a marker of another boot"

        # The guard comes back, re-applies everything, writes this boot's id; only then the command starts.
        guard.start()
        wait_until(lambda: marker.exists() and marker.read_text().strip() == boot_id, DEADLINE,
                   what="the guard's marker")
        written = marker.stat().st_mtime
        wait_until(command_started, DEADLINE, what="the command to start after the marker")
        code, out = sh(sandbox, "cat /tmp/started")
        assert int(out) >= int(written), f"command started at {out.strip()}, marker written at {written:.0f}"
    finally:
        guard.reload()
        if guard.status != "running":
            guard.start()
        wait_until(lambda: marker.exists() and marker.read_text().strip() == boot_id, DEADLINE,
                   what="the guard's marker")
