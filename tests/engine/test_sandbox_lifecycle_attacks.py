"""Lifetimes and idle timeouts hold against the sandbox itself (the attacks of the hardening issue).

The old supervisor ran as the sandbox's user in its PID namespace and enforced the limits from inside:
a `kill -STOP` of it, a ptrace attach, killing it or crashing (with unbounded `on-failure` restarts and a
fresh clock each time) let a sandbox with `max_lifetime: 20s` run for 22+ minutes. Now the host guard
enforces them from outside (host PID namespace, KILL): every attack below ends the sandbox at its
limit, with the documented status (124 lifetime, 123 idle), and a crash is told apart from a timeout.
All pools start together, so their limits run down in parallel; every wait has a deadline.
"""

from __future__ import annotations

import pytest

from testbed.deploy import engine_spec, shared_deployment
from tests.engine.sandbox_helpers import ended, sh

pytestmark = pytest.mark.docker

LIFETIME = 8
IDLE = 5
SLACK = 12  # beyond a limit: the guard checks every second; Docker's crash retries back off briefly
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
        "execstop": box("exec sleep 100000"),
        "traced": {"base_image": debian_image, "command": ["python3", "-c", PTRACE], "limits": {"memory": "64MiB"},
                   "lifecycle": lifetime},
        "killer": box("sleep 2; kill -KILL $PPID; sleep 100000"),
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


# First in the module: it attacks while the sandbox still runs.
def test_stopping_the_supervisor_from_an_exec_does_not_outlive_max_lifetime(stack):
    sandbox = stack.container("execstop")
    # A signal is delivered asynchronously: wait (bounded) until the supervisor shows as stopped.
    code, out = sh(sandbox, f"pid=$({SUPERVISOR_PID}); kill -STOP $pid && for i in 1 2 3 4 5; do "
                            "grep -q '^State:[[:space:]]*T' /proc/$pid/status && break; sleep 1; done; "
                            "sed -n 's/^State:[[:space:]]*//p' /proc/$pid/status")
    assert code == 0 and out.startswith("T"), out
    final = ended(sandbox, LIFETIME + SLACK)
    assert final["ExitCode"] == 124, final
    assert LIFETIME <= final["lived"] < LIFETIME + 8, final


@pytest.mark.parametrize("pool", ["stopped", "bomb"])
def test_stopping_the_supervisor_from_the_command_does_not_outlive_max_lifetime(stack, pool):
    stack.proves("Container.entrypoints", "Container.restart", "Container.maxRetryCount")
    sandbox = stack.container(pool)
    final = ended(sandbox, LIFETIME + SLACK)
    assert "supervisor-stopped" in _logs(sandbox)  # the attack ran
    assert final["ExitCode"] == 124 and not final["OOMKilled"], final
    assert LIFETIME <= final["lived"] < LIFETIME + 8, final
    assert "max lifetime reached; stopping the sandbox (exit 124)" in _logs(sandbox)


def test_a_ptrace_attach_to_the_supervisor_does_not_outlive_max_lifetime(stack):
    sandbox = stack.container("traced")
    final = ended(sandbox, LIFETIME + SLACK)
    assert "supervisor-attached" in _logs(sandbox)  # the attack ran
    assert final["ExitCode"] == 124, final
    assert LIFETIME <= final["lived"] < LIFETIME + 8, final


def test_killing_the_supervisor_ends_in_bounded_retries_not_a_fresh_clock(stack):
    sandbox = stack.container("killer")
    final = ended(sandbox, LIFETIME + SLACK)
    # Each run kills its supervisor after 2 s (exit 137) and Docker retries at most 3 times; the clock is
    # the first start's, so the sandbox is gone by its lifetime whichever comes first.
    assert final["restarts"] <= 3, final
    assert final["ExitCode"] in (124, 137), final
    assert final["lived"] < LIFETIME + 8, final


def test_a_crashing_command_is_retried_three_times_and_keeps_its_own_status(stack):
    sandbox = stack.container("crash")
    final = ended(sandbox, 10 + SLACK)
    # A crash is not a timeout: the command's own status, after Docker's bounded retries.
    assert final["ExitCode"] == 3 and final["restarts"] == 3, final
    assert _logs(sandbox).count("crashing") == 4
    assert "stopping the sandbox" not in _logs(sandbox)


def test_stopping_the_supervisor_does_not_defeat_the_idle_timeout(stack):
    sandbox = stack.container("idlestop")
    final = ended(sandbox, IDLE + SLACK)
    assert "supervisor-stopped" in _logs(sandbox)
    assert final["ExitCode"] == 123, final
    assert IDLE <= final["lived"] < IDLE + 8, final
    assert "idle timeout reached; stopping the sandbox (exit 123)" in _logs(sandbox)


def test_readiness_probes_do_not_count_as_activity(stack):
    stack.proves("Container.healthcheck")
    sandbox = stack.container("probed")
    final = ended(sandbox, IDLE + SLACK)
    assert final["ExitCode"] == 123, final
    assert IDLE <= final["lived"] < IDLE + 8, final
    sandbox.reload()
    # It was probed all along (the health log holds the last runs), and still went idle.
    assert len(sandbox.attrs["State"]["Health"]["Log"]) >= 3, sandbox.attrs["State"]["Health"]
