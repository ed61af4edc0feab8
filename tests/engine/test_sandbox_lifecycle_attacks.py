"""Lifetimes and idle timeouts hold against the sandbox itself (the attacks of the hardening issue).

The old supervisor ran as the sandbox's user in its PID namespace and enforced the limits from inside:
a `kill -STOP` of it, a ptrace attach, killing it or crashing (with unbounded `on-failure` restarts and a
fresh clock each time) let a sandbox with `max_lifetime: 20s` run for 22+ minutes. Now the host guard
enforces them from outside (host PID namespace, KILL): every attack below ends the sandbox at its
limit, with the documented status (124 lifetime, 123 idle), and a crash is told apart from a timeout.
All pools start together, so their limits run down in parallel. Each test proves the cause of the end: the
exit status, and the guard's own record of ending the sandbox (`guard_expiry`: at its first check at or past
the limit, by its own clock). Waits have generous deadlines and nothing asserts how fast the machine is: on a
busy machine everything is later, and still caused by the guard.
"""

from __future__ import annotations

import time

import pytest

from sandstack.spec.contract import EXIT_IDLE, EXIT_LIFETIME
from testbed.deploy import engine_spec, shared_deployment
from testbed.waiting import wait_until
from tests.engine.sandbox_helpers import (client, docker_time, ended, guard_expiries, guard_expiry, sh_in_a_run,
                                          state)

pytestmark = pytest.mark.docker

LIFETIME = 8
IDLE = 5
# The command's parent is the supervisor; the echo proves in the logs that the attack ran.
STOP_SUPERVISOR = "kill -STOP $PPID && echo supervisor-stopped"
# Attaches to the supervisor with ptrace (which stops it) and holds it, as a debugger would.
PTRACE = (
    "import ctypes, os, time\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "assert libc.ptrace(16, os.getppid(), None, None) == 0, ctypes.get_errno()  # PTRACE_ATTACH\n"
    "print('supervisor-attached', flush=True)\n"
    "time.sleep(100000)\n"
)


@pytest.fixture(scope="module")
def stack(debian_image, busybox_image, harness_sweep_orphans, tmp_path_factory):
    small = {"memory": "16MiB"}
    lifetime = {"max_lifetime": f"{LIFETIME}s", "on_expiry": "stop"}

    def box(command: str, **extra) -> dict:
        return {"base_image": busybox_image, "command": ["sh", "-c", command], "limits": small,
                "lifecycle": lifetime, **extra}

    templates = {
        "stopped": box(f"{STOP_SUPERVISOR}; exec sleep 100000"),
        "execstop": box("exec sleep 100000", lifecycle={**lifetime, "on_expiry": "restart"}),
        "traced": {"base_image": debian_image, "command": ["python3", "-c", PTRACE], "limits": {"memory": "64MiB"},
                   "lifecycle": lifetime},
        # Each run lasts 3 s: four runs (Docker's three retries) outlast the lifetime, so the guard ends it.
        "killer": box("sleep 3; kill -KILL $PPID; sleep 100000"),
        "bomb": box(f"{STOP_SUPERVISOR}; while :; do sleep 100000 & done", limits={**small, "pids": 24}),
        "crash": box("echo crashing; sleep 2; exit 3", lifecycle={}),
        "idlestop": box(f"{STOP_SUPERVISOR}; exec sleep 100000", lifecycle={"idle_timeout": f"{IDLE}s"}),
        # Probed every second: the probe's CPU must not count as activity.
        "probed": box("exec sleep 100000", lifecycle={"idle_timeout": f"{IDLE}s"},
                      readiness={"command": ["cat", "/proc/self/stat"], "interval": "1s", "timeout": "1s"}),
    }
    spec = engine_spec(debian_image, templates)
    with shared_deployment(__file__, tmp_path_factory.mktemp("lifecycle-attacks"), spec) as shared:
        yield shared


def _logs(container) -> str:
    return container.logs(stdout=True, stderr=True).decode(errors="replace")


# The supervisor's pid inside the sandbox (its command name is the script's).
SUPERVISOR_PID = 'for d in /proc/[0-9]*; do read -r c < "$d/comm" && [ "$c" = supervise ] && echo "${d#/proc/}"; done'


def test_stopping_the_supervisor_from_an_exec_does_not_outlive_max_lifetime(stack):
    sandbox = stack.container("execstop")
    # An 'on_expiry: restart' pool, so that there is always a run to attack, however long the deployment took
    # on a busy machine: attack one run (retried if the run ends before the attack is seen in it).
    for _ in range(10):
        run = wait_until(lambda: (lambda s: s["StartedAt"] if s["Running"] else None)(state(sandbox)), 60,
                         what="a run of the sandbox")
        # A signal is delivered asynchronously: wait (bounded) until the supervisor shows as stopped.
        code, out = sh_in_a_run(sandbox, f"pid=$({SUPERVISOR_PID}); kill -STOP $pid && for i in 1 2 3 4 5; do "
                                         "grep -q '^State:[[:space:]]*T' /proc/$pid/status && break; sleep 1; done; "
                                         "sed -n 's/^State:[[:space:]]*//p' /proc/$pid/status")
        if code == 0 and out.startswith("T") and state(sandbox)["StartedAt"] == run:
            break
    else:
        pytest.fail(f"could not stop the supervisor of one run of {sandbox.name}: {code} {out!r}")
    started = docker_time(run)
    # That run ends with the lifetime's status (Docker's `die` event of it; the next run starts afresh)...
    died = wait_until(lambda: [e for e in _events(sandbox, "die") if e["timeNano"] / 1e9 > started], 120,
                      what="the attacked run to end")
    assert died[0]["Actor"]["Attributes"]["exitCode"] == str(EXIT_LIFETIME), died[0]
    # ...ended by the guard at its limit: the guard's record of that run is its last one before the run died
    # (one per run: a fresh clock each; the next run's comes a lifetime later).
    ended_at = died[0]["timeNano"] / 1e9
    records = [r for r in guard_expiries(stack, sandbox) if r.now <= ended_at]
    assert records and records[-1].now >= int(started), (started, ended_at, guard_expiries(stack, sandbox))
    record = records[-1]
    assert (record.reason, record.limit, record.exit) == ("max lifetime", LIFETIME, EXIT_LIFETIME), record
    assert record.now - record.since >= LIFETIME and (record.checked is None
                                                      or record.checked - record.since < LIFETIME), record


@pytest.mark.parametrize("pool", ["stopped", "bomb"])
def test_stopping_the_supervisor_from_the_command_does_not_outlive_max_lifetime(stack, pool):
    stack.proves("Container.entrypoints", "Container.restart", "Container.maxRetryCount")
    sandbox = stack.container(pool)
    final = ended(sandbox)
    assert "supervisor-stopped" in _logs(sandbox)  # the attack ran
    assert final["ExitCode"] == EXIT_LIFETIME and not final["OOMKilled"], final
    guard_expiry(stack, sandbox, "max lifetime", LIFETIME, EXIT_LIFETIME)
    assert "max lifetime reached; stopping the sandbox (exit 124)" in _logs(sandbox)


def test_a_ptrace_attach_to_the_supervisor_does_not_outlive_max_lifetime(stack):
    sandbox = stack.container("traced")
    final = ended(sandbox)
    assert "supervisor-attached" in _logs(sandbox)  # the attack ran
    assert final["ExitCode"] == EXIT_LIFETIME, final
    guard_expiry(stack, sandbox, "max lifetime", LIFETIME, EXIT_LIFETIME)


def test_killing_the_supervisor_ends_in_bounded_retries_not_a_fresh_clock(stack):
    sandbox = stack.container("killer")
    final = ended(sandbox)
    # Each run kills its supervisor after 3 s (exit 137) and Docker retries at most 3 times; the guard ends it
    # at its lifetime, counted from the first run's start: a crash restart is no fresh clock.
    assert final["restarts"] <= 3, final
    assert final["ExitCode"] == EXIT_LIFETIME, final
    record = guard_expiry(stack, sandbox, "max lifetime", LIFETIME, EXIT_LIFETIME)
    starts = _start_times(sandbox)
    assert len(starts) >= 2, starts  # it was killed and restarted before the guard ended it
    # The guard's clock is the first run's start (its init's start, whole seconds, at or before Docker's start
    # event; a second of leeway for the kernel's boot time), never a later run's, which began 3 s after it.
    assert record.since <= starts[0] + 1 < starts[1], (record, starts)


def test_a_crashing_command_is_retried_three_times_and_keeps_its_own_status(stack):
    sandbox = stack.container("crash")
    final = ended(sandbox)
    # A crash is not a timeout: the command's own status, after Docker's bounded retries.
    assert final["ExitCode"] == 3 and final["restarts"] == 3, final
    assert _logs(sandbox).count("crashing") == 4
    assert "stopping the sandbox" not in _logs(sandbox)


def test_stopping_the_supervisor_does_not_defeat_the_idle_timeout(stack):
    sandbox = stack.container("idlestop")
    final = ended(sandbox)
    assert "supervisor-stopped" in _logs(sandbox)
    assert final["ExitCode"] == EXIT_IDLE, final
    guard_expiry(stack, sandbox, "idle timeout", IDLE, EXIT_IDLE)
    assert "idle timeout reached; stopping the sandbox (exit 123)" in _logs(sandbox)


def test_readiness_probes_do_not_count_as_activity(stack):
    stack.proves("Container.healthcheck")
    sandbox = stack.container("probed")
    final = ended(sandbox)
    assert final["ExitCode"] == EXIT_IDLE, final
    record = guard_expiry(stack, sandbox, "idle timeout", IDLE, EXIT_IDLE)
    sandbox.reload()
    # A probe ran inside the idle window the guard counted (after its clock started, before it acted), and the
    # clock was not restarted by it. How many probes ran depends on how busy the machine was, so no count.
    health = sandbox.attrs["State"]["Health"]
    probes = [docker_time(run["Start"]) for run in health["Log"]]
    assert any(record.since + 1 <= probe <= record.now for probe in probes), (record, health)


def _events(container, kind: str) -> list[dict]:
    """Docker's `kind` events ("start", "die") of `container` so far, oldest first."""
    container.reload()
    created = int(docker_time(container.attrs["Created"]))
    events = client().events(since=created, until=int(time.time()) + 1, decode=True,
                             filters={"container": container.id, "event": kind})
    return sorted(events, key=lambda event: event["timeNano"])


def _start_times(container) -> list[float]:
    """When Docker started each run of `container` (epoch seconds, from its `start` events), in order."""
    return [event["timeNano"] / 1e9 for event in _events(container, "start")]
