"""components/assets/supervise.sh run by /bin/sh with the arguments components/sandbox_pool.py gives it, its
guard state, boot id and mountinfo moved under a temporary folder: it waits for the guard, stays expired
once the guard expired its container, and turns the guard's signals into the documented exit statuses."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from sandstack.components.sandbox_pool import SUPERVISOR_ENTRYPOINT
from sandstack.plan.snapshot import SUPERVISOR_SOURCE
from sandstack.spec.contract import EXIT_IDLE, EXIT_LIFETIME
from tests.assets.fakes import BOOT_ID, SHELL

CID = "fedcba9876543210" * 4
# A line of /proc/self/mountinfo naming the container: Docker mounts its own files into every container.
MOUNTINFO = (
    "1201 1180 0:52 / / rw,relatime master:1 - overlay overlay rw\n"
    f"1215 1201 259:2 /var/lib/docker/containers/{CID}/resolv.conf /etc/resolv.conf rw,relatime - ext4 "
    "/dev/nvme0n1p2 rw\n"
)


class Supervisor:
    def __init__(self, root: Path):
        self.root = root
        self.guard = root / "guard"
        (self.guard / "expired").mkdir(parents=True)
        (root / "boot_id").write_text(BOOT_ID + "\n")
        (root / "mountinfo").write_text(MOUNTINFO)
        self.started: list[subprocess.Popen] = []

    def args(self, *command: str) -> list[str]:
        # The production arguments, with the paths moved here: a later --guard-state wins.
        production = list(SUPERVISOR_ENTRYPOINT[1:])
        assert production[-1] == "--"
        return [SHELL, str(SUPERVISOR_SOURCE), *production[:-1], f"--guard-state={self.guard}",
                f"--boot-id={self.root / 'boot_id'}", f"--mountinfo={self.root / 'mountinfo'}", "--", *command]

    def ready(self, boot_id: str = BOOT_ID) -> None:
        (self.guard / "ready").write_text(boot_id + "\n")

    def run(self, *command: str, args: list[str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(args or self.args(*command), capture_output=True, text=True, timeout=60)

    def start(self, *command: str) -> subprocess.Popen:
        """The supervisor in a session of its own (what Docker's init and the container's end would clean up,
        the test does: `stop()`), its stderr in a file, since what it leaves behind may hold a pipe open."""
        proc = subprocess.Popen(self.args(*command), stdout=subprocess.DEVNULL,
                                stderr=(self.root / "stderr").open("w"), start_new_session=True)
        self.started.append(proc)
        return proc

    def finish(self, proc: subprocess.Popen) -> tuple[int, str]:
        return proc.wait(timeout=20), (self.root / "stderr").read_text()

    def stop(self) -> None:
        for proc in self.started:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=20)

    def ran(self) -> Path:
        return self.root / "ran"

    def command(self, then: str = "exit 0") -> tuple[str, str, str]:
        """A command that records that it ran (and its pid), then does `then`."""
        return "sh", "-c", f"echo $$ >{self.ran()}; {then}"


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, proc.returncode
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)
    time.sleep(0.1)  # the command has written its pid: let it reach `exec sleep`


def _wait_for_child(proc: subprocess.Popen, cmdline: str, seconds: float = 60) -> None:
    """Until a child of `proc` runs `cmdline` (read from /proc: no timing assumed)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        except FileNotFoundError:  # it has exited: said below
            children = []
        if any(_cmdline(int(pid)) == cmdline for pid in children):
            return
        assert proc.poll() is None, proc.returncode
        assert time.monotonic() < deadline, f"no child of the supervisor runs {cmdline!r}"
        time.sleep(0.02)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return ""


def _gone(pid: int, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def sup(tmp_path):
    supervisor = Supervisor(tmp_path)
    yield supervisor
    supervisor.stop()


@pytest.mark.parametrize("reason, status, message", [
    ("lifetime", EXIT_LIFETIME, "this sandbox reached its max lifetime; it stays stopped"),
    ("idle", EXIT_IDLE, "this sandbox reached its idle timeout; it stays stopped"),
])
def test_a_container_the_guard_expired_exits_with_its_status_without_running_the_command(sup, reason, status,
                                                                                          message):
    sup.ready()
    (sup.guard / "expired" / CID).write_text(reason + "\n")
    result = sup.run(*sup.command())
    assert (result.returncode, result.stderr) == (status, f"sandstack: {message}\n")
    assert not sup.ran().exists()


def test_without_a_marker_for_its_container_the_command_runs_and_its_status_is_the_sandboxs(sup):
    sup.ready()
    (sup.guard / "expired" / ("0" * 64)).write_text("lifetime\n")  # another container's
    result = sup.run(*sup.command("exit 7"))
    assert (result.returncode, result.stderr) == (7, "")
    assert sup.ran().exists()


def test_the_command_waits_for_the_guards_marker_of_this_boot(sup):
    sup.ready("an-earlier-boot")
    proc = sup.start(*sup.command())
    time.sleep(1.5)
    assert proc.poll() is None and not sup.ran().exists()
    sup.ready()
    code, err = sup.finish(proc)
    assert code == 0 and sup.ran().exists()
    assert err == "sandstack: waiting for the host guard (0s)\n"


@pytest.mark.parametrize("sig, status, message", [
    (signal.SIGUSR1, EXIT_LIFETIME, "max lifetime reached"),
    (signal.SIGUSR2, EXIT_IDLE, "idle timeout reached"),
])
def test_the_guards_signal_ends_the_sandbox_with_the_documented_status(sup, sig, status, message):
    sup.ready()
    proc = sup.start(*sup.command("exec sleep 60"))
    _wait_for(sup.ran(), proc)
    child = int(sup.ran().read_text())
    proc.send_signal(sig)
    code, err = sup.finish(proc)
    assert (code, err) == (status, f"sandstack: {message}; stopping the sandbox (exit {status})\n")
    assert _gone(child)


def test_stopped_by_docker_the_command_gets_term_and_the_sandbox_exits_143(sup):
    sup.ready()
    term = sup.root / "term"
    # The command says it runs only once its trap is set: a TERM before that killed it outright (no 'term' file),
    # which a busy machine did while the test waited a fixed 0.1 s after an earlier marker.
    proc = sup.start("sh", "-c", f"trap 'echo TERM >{term}; exit 0' TERM; echo $$ >{sup.ran()}; sleep 60 & wait")
    _wait_for(sup.ran(), proc)
    proc.send_signal(signal.SIGTERM)
    assert sup.finish(proc)[0] == 143
    assert term.read_text() == "TERM\n"


def test_without_a_command_it_stays_up_until_stopped(sup):
    sup.ready()
    proc = sup.start()
    # Up for good: it reached its last loop (its `sleep` child), past the traps; a fixed 0.3 s was not always
    # enough on a busy machine, and a USR1 before the trap killed it by the signal.
    _wait_for_child(proc, "sleep 2147483647")
    assert proc.poll() is None
    proc.send_signal(signal.SIGUSR1)
    assert sup.finish(proc) == (EXIT_LIFETIME, f"sandstack: max lifetime reached; stopping the sandbox (exit {EXIT_LIFETIME})\n")


@pytest.mark.parametrize("drop", ["--exit-lifetime=", "--exit-idle=", "--guard-state="])
def test_without_its_contract_arguments_the_supervisor_refuses_to_run_the_command(sup, drop):
    sup.ready()
    args = [a for a in sup.args(*sup.command()) if not a.startswith(drop)]
    result = sup.run(args=args)
    assert result.returncode == 2 and "usage: supervise" in result.stderr
    assert not sup.ran().exists()
