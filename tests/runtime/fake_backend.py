"""A stand-in for DockerBackend with the same interface (sandstack.runtime.backend.SandboxBackend), used
while the one Docker daemon is busy with the engine tests.

It behaves like the real one where the runtime can tell: each sandbox is a directory on this machine playing
the container's '/', with its writable paths in it; `exec` runs the real process (sh, tar, bash, python3)
with the container path of its working directory mapped into that directory, so the runtime's file scripts,
output caps, timeouts and kills run for real. Pausing stops the sandbox's processes (SIGSTOP) and refuses
exec like Docker's 409; a restart kills them and empties the tmpfs paths; a stopped, removed or
unreachable container fails the way Docker's does. CPU use is a counter a test advances (Docker's stats
number, read from outside the sandbox).

A command that cannot start (not found, a missing working directory, an argument the kernel refuses) is what
Docker makes of it: the exec runs, its output is the OCI runtime's error and its exit code 127 (not found) or
126 (moby's daemon/exec.go), never a failed API call. Run as root, processes get no capabilities (setpriv), like
a sandbox's: a file's mode binds them (`chmod 000` makes it unreadable), as it binds the sandbox's own user.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import signal
import subprocess
import tarfile
import threading
import time
import uuid
from pathlib import Path
from typing import BinaryIO

from sandstack.runtime.backend import (
    ContainerState,
    DaemonUnavailable,
    ExecStatus,
    SandboxBackend,
    SandboxGone,
    BackendError,
    SandboxNotRunning,
    Sink,
    WorkspaceReset,
)


# In every process a fake sandbox runs (and so in all they start, `setsid` ones included): which backend made it, so
# `close` finds them all, as removing a container ends every process in it.
MARK = "SANDSTACK_TEST_BACKEND"


class FakeBackend(SandboxBackend):
    def __init__(self, root: Path, sandboxes: list[str], writable: dict[str, str]):
        """`writable`: container path → 'tmpfs' or 'disk', created in every sandbox."""
        self.root = root
        self.mark = uuid.uuid4().hex
        self.writable = writable
        self.status = {name: "running" for name in sandboxes}
        self.exit_codes: dict[str, int | None] = {name: None for name in sandboxes}
        self.starts = {name: 1 for name in sandboxes}
        self.cpu = {name: 0 for name in sandboxes}
        self.procs: dict[str, list[subprocess.Popen]] = {name: [] for name in sandboxes}
        self.calls: list[tuple[str, str]] = []  # (operation, sandbox), in order
        self.daemon_down = False
        self.image: dict[str, dict[str, bytes]] = {}  # container path → the image's files there (seeding)
        self.stuck: set[Path] = set()  # files a reset cannot remove (as an immutable file on the host)
        self.whiteouts: dict[str, set[str]] = {}  # sandbox → image files its session removed (container paths)
        self.written_roots: list[tuple[str, bytes]] = []  # what write_root was given, in order
        self.tmpfs_size: dict[str, int] = {}  # container path → its tmpfs's size (Docker's HostConfig.Tmpfs)
        self.died: dict[str, int] = {}  # sandbox → the exit status of its last `die` (Docker's past events)
        self.generation = {name: 1 for name in sandboxes}  # Docker's Id is f"{name}-{generation}": a new container
        # Each sandbox's address on its pool network, and the gateway's network-profile records (gateway → address →
        # line), as the gateway's helper reads them.
        self.addresses = {name: f"10.213.0.{i + 2}" for i, name in enumerate(sandboxes)}
        self.profile_files: dict[str, dict[str, str]] = {}
        self.gateway_down = False
        self.profile_checks: list[str] = []  # what each record asked the gateway's helper ('' : nothing)
        self.limits: dict[str, dict[str, int]] = {}  # sandbox → the limits its last resize gave (Docker's update)
        for name in sandboxes:
            for path in writable:
                self.path(name, path).mkdir(parents=True, exist_ok=True)

    def address(self, name: str) -> str | None:
        self._check("address", name)
        return self.addresses.get(name) if self.status.get(name) == "running" else None

    def set_profile(self, gateway: str, address: str, line: str | None, check: str = "") -> None:
        self.calls.append(("set_profile", address))
        self.profile_checks.append(check)
        if self.gateway_down:
            raise BackendError(f"container {gateway!r} is not running")
        files = self.profile_files.setdefault(gateway, {})
        if line is None:
            files.pop(address, None)
        else:
            files[address] = line

    def path(self, name: str, container_path: str) -> Path:
        """Where a container path of `name` lives on this machine."""
        return self.root / name / container_path.lstrip("/")

    # Faults a test injects

    def die(self, name: str, exit_code: int = 137) -> None:
        self._kill(name)
        self.status[name], self.exit_codes[name] = "exited", exit_code
        self.died[name] = exit_code

    def remove(self, name: str) -> None:
        self._kill(name)
        self.status[name] = "missing"

    def recreate(self, name: str) -> None:
        """A new container in the sandbox's name (an apply renewed it): a new Id, running, its writable paths
        empty, nothing of the old one's processes."""
        self._kill(name)
        for path in self.writable:
            target = self.path(name, path)
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
        self.status[name], self.exit_codes[name] = "running", None
        self.starts[name] = self.starts.get(name, 0) + 1
        self.generation[name] = self.generation.get(name, 0) + 1

    # The interface

    def _check(self, operation: str, name: str) -> str:
        if self.daemon_down:
            raise DaemonUnavailable("the Docker daemon does not answer (ConnectionError)")
        self.calls.append((operation, name))
        status = self.status.get(name, "missing")
        if status == "missing":
            raise SandboxGone(f"container {name!r} does not exist on this host")
        return status

    def state(self, name: str) -> ContainerState:
        if self.daemon_down:
            raise DaemonUnavailable("the Docker daemon does not answer (ConnectionError)")
        status = self.status.get(name, "missing")
        generation = self.generation.get(name, 1)
        return ContainerState(status, self.exit_codes.get(name), f"start-{self.starts.get(name)}",
                              *((None, None) if status == "missing" else (f"{name}-{generation}",
                                                                          f"created-{generation}")))

    def exec(self, name: str, argv: list[str], *, workdir: str, env: dict[str, str] | None = None,
             stdin: BinaryIO | None = None, stdout: Sink, stderr: Sink, timeout: float | None = None) -> ExecStatus:
        status = self._check("exec", name)
        if status == "paused":
            raise SandboxNotRunning(f"container {name!r}: Container {name} is paused, unpause the container "
                                    "before exec")
        if status != "running":
            raise SandboxNotRunning(f"container {name!r}: Container {name} is not running")
        started = time.monotonic()
        # Docker resolves the working directory inside the container: '..' stops at its '/'.
        cwd = self.path(name, posixpath.normpath("/" + workdir))
        if not cwd.is_dir() or not cwd.resolve().is_relative_to((self.root / name).resolve()):
            return _not_started(stdout, started, f'chdir to cwd ("{workdir}") set in config.json failed: no such '
                                                 "file or directory")
        if "/" not in argv[0] and shutil.which(argv[0]) is None:
            return _not_started(stdout, started, f'exec: "{argv[0]}": executable file not found in $PATH', 127)
        try:
            proc = subprocess.Popen([*NO_CAPABILITIES, *argv], cwd=cwd,
                                    env={"PATH": os.environ["PATH"], "HOME": "/", **(env or {}), MARK: self.mark},
                                    stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except FileNotFoundError as error:  # a path that names no program
            return _not_started(stdout, started, f'exec: "{argv[0]}": {error.strerror.lower()}', 127)
        except (OSError, ValueError) as error:  # a NUL byte, an argument list over the kernel's limit...
            return _not_started(stdout, started, f"exec: {argv[0]!r}: {error}")
        self.procs[name].append(proc)
        failed: list[BaseException] = []  # a sink's own error (a bound passed): Docker's stream is closed on it
        readers = [threading.Thread(target=_copy, args=(proc, proc.stdout, stdout, failed), daemon=True),
                   threading.Thread(target=_copy, args=(proc, proc.stderr, stderr, failed), daemon=True)]
        for reader in readers:
            reader.start()
        if stdin is not None:
            try:
                shutil.copyfileobj(stdin, proc.stdin)
                proc.stdin.close()
            except BrokenPipeError:
                pass  # the process exited without reading it all, as Docker's stream allows
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return ExecStatus(None, int((time.monotonic() - started) * 1000))
        for reader in readers:
            reader.join()
        if failed:
            raise failed[0]
        return ExecStatus(proc.returncode, int((time.monotonic() - started) * 1000))

    def spawn(self, name, argv, *, workdir, env, stdout, stderr, stdin=False, tty=False):
        from tests.runtime.fake_spawn import FakeHandle

        return FakeHandle(self, name, argv, workdir=workdir, env=env, stdout=stdout, stderr=stderr, stdin=stdin,
                          tty=tty)

    def last_exit(self, name: str, since: str | None) -> int | None:
        return self.died.get(name)

    def tmpfs_sizes(self, name: str) -> dict[str, int]:
        self._check("inspect", name)
        return {path: self.tmpfs_size[path] for path, kind in self.writable.items()
                if kind == "tmpfs" and path in self.tmpfs_size}

    def cpu_usage_ns(self, name: str) -> int | None:
        return self.cpu[name] if self._check("stats", name) == "running" else None

    def pause(self, name: str) -> None:
        if self._check("pause", name) != "running":
            raise SandboxNotRunning(f"container {name!r}: Container {name} is not running")
        self._signal(name, signal.SIGSTOP)
        self.status[name] = "paused"

    def unpause(self, name: str) -> None:
        if self._check("unpause", name) != "paused":
            raise SandboxNotRunning(f"container {name!r}: Container {name} is not paused")
        self._signal(name, signal.SIGCONT)
        self.status[name] = "running"

    def restart(self, name: str) -> None:
        self._check("restart", name)
        self._kill(name)
        for path, kind in self.writable.items():
            if kind == "tmpfs":  # a new tmpfs on every start; a disk path keeps its files
                target = self.path(name, path)
                shutil.rmtree(target)
                target.mkdir()
        self.status[name], self.exit_codes[name] = "running", None
        self.starts[name] += 1

    def stop(self, name: str) -> None:
        self._check("stop", name)
        self._kill(name)
        self.status[name], self.exit_codes[name] = "exited", 143

    def start(self, name: str) -> None:
        if self._check("start", name) == "running":
            return
        for path, kind in self.writable.items():
            if kind == "tmpfs":
                target = self.path(name, path)
                shutil.rmtree(target)
                target.mkdir()
        self.status[name], self.exit_codes[name] = "running", None
        self.starts[name] += 1

    def clean_workspaces(self, name: str, workspaces: list[WorkspaceReset]) -> None:
        """As the real one's helper: with every right (this process's), keeping `keep`, then seeding."""
        if self._check("clean", name) not in ("exited", "created"):
            raise BackendError(f"container {name!r} is running: a reset stops it first")
        for workspace in workspaces:
            root = self.path(name, workspace.path)
            for entry in list(root.iterdir()):
                if entry.name in workspace.keep:
                    continue
                if entry in self.stuck or any(s.is_relative_to(entry) for s in self.stuck):
                    raise BackendError(f"the disk workspace {workspace.path!r} of {name!r} could not be emptied "
                                       f"(exit 1): rm: cannot remove '{entry.name}': Operation not permitted")
                _chmod_all(entry)
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
            if workspace.seed:
                for relative, data in self.image.get(workspace.path, {}).items():
                    (root / relative).parent.mkdir(parents=True, exist_ok=True)
                    (root / relative).write_bytes(data)

    def resize(self, name: str, update: dict[str, int]) -> None:
        self._check("resize", name)  # a stopped container takes an update too, as Docker's does
        self.limits[name] = dict(update)

    def reset_root(self, name: str) -> None:
        """As the real one's (sandstack.runtime.rootfs): everything outside the writable paths goes (this fake's
        image root is empty), the container stopped."""
        if self._check("reset-root", name) not in ("exited", "created"):
            raise BackendError(f"container {name!r} is running: a reset stops it first")
        keep = [self.path(name, path) for path in self.writable]

        def empty(directory: Path) -> None:
            for entry in list(directory.iterdir()):
                if entry in keep:
                    continue
                if entry.is_dir() and not entry.is_symlink() and any(k.is_relative_to(entry) for k in keep):
                    empty(entry)
                    continue
                _chmod_all(entry)
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()

        empty(self.root / name)
        self.whiteouts.pop(name, None)

    def read_root(self, name: str, out) -> None:
        """As the real one's: a tar of everything outside the writable paths (this fake's image root is empty, so
        its upper directory is all of it; `whiteouts`, container paths, stand for image files the session removed)."""
        if self.daemon_down:
            raise DaemonUnavailable("the Docker daemon does not answer (ConnectionError)")
        self.calls.append(("read-root", name))
        base = self.root / name
        keep = {self.path(name, path) for path in self.writable}
        with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for directory, dirs, files in os.walk(base):
                here = Path(directory)
                dirs[:] = sorted(d for d in dirs if here / d not in keep)
                for entry in [*dirs, *sorted(files)]:
                    path = here / entry
                    if any(k.is_relative_to(path) for k in keep):
                        continue  # a writable path's parent (its mount point's): not the session's change
                    tar.add(path, arcname=str(path.relative_to(base)), recursive=False)
            for removed in sorted(self.whiteouts.get(name, ())):
                info = tarfile.TarInfo(removed.lstrip("/"))
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 0, 0
                tar.addfile(info)

    def write_root(self, name: str, tar: BinaryIO) -> None:
        """As the real one's, on a stopped container whose root a reset emptied (a whiteout: the image file stays
        removed, which in this empty image it already is)."""
        if self._check("write-root", name) not in ("exited", "created"):
            raise BackendError(f"container {name!r} is running: a restore stops it first")
        self.written_roots.append((name, tar.read()))
        tar.seek(0)
        with tarfile.open(fileobj=tar, mode="r|") as entries:
            for member in entries:
                if member.ischr():
                    self.whiteouts.setdefault(name, set()).add("/" + member.name)
                    continue
                entries.extract(member, self.root / name, filter="fully_trusted")

    def _signal(self, name: str, sig: int) -> None:
        # Every process group an exec started, even when its leader has exited: Docker's freezer and kill
        # reach a sandbox's background processes too.
        for proc in self.procs[name]:
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _kill(self, name: str) -> None:
        self._signal(name, signal.SIGKILL)
        for proc in self.procs[name]:
            proc.wait()
        self.procs[name] = []

    def close(self) -> None:
        for name in self.procs:
            self._kill(name)
        # What left its exec's process group (`setsid`, a shell's job) and outlived it — even one a kill stopped and
        # the test's end cut off before its SIGKILL (a stopped `sleep 300` then broke later tests that list processes).
        mark = f"{MARK}={self.mark}".encode()
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and mark in (entry / "environ").read_bytes().split(b"\0"):
                    os.kill(int(entry.name), signal.SIGKILL)
            except (OSError, ValueError):  # gone meanwhile, or not ours to read
                pass


def _chmod_all(entry: Path) -> None:
    """What DAC_OVERRIDE gives the real helper, for a test run without root: every directory writable."""
    if entry.is_dir() and not entry.is_symlink():
        entry.chmod(0o700)
        for child in entry.iterdir():
            _chmod_all(child)


def _copy(proc: subprocess.Popen, source, sink: Sink, failed: list[BaseException]) -> None:
    try:
        for chunk in iter(lambda: source.read1(65536), b""):
            sink.write(chunk)
    except Exception as error:  # the real backend raises it from exec, with the stream closed
        failed.append(error)
        source.close()
        try:
            os.killpg(proc.pid, signal.SIGPIPE)  # what a writer into a closed stream gets
        except (ProcessLookupError, PermissionError):
            pass
        return
    source.close()


def _not_started(stdout: Sink, started: float, why: str, exit_code: int = 126) -> ExecStatus:
    """What Docker answers for a process that could not start: the error on stdout, 126 or 127."""
    stdout.write(f"OCI runtime exec failed: exec failed: unable to start container process: {why}: unknown\r\n"
                 .encode(errors="replace"))
    return ExecStatus(exit_code, int((time.monotonic() - started) * 1000))


# A sandbox's processes have no capabilities; root's would read any file whatever its mode.
NO_CAPABILITIES = (["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"]
                   if os.geteuid() == 0 and shutil.which("setpriv") else [])
