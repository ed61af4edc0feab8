"""The runtime's one door to the sandboxes: a backend that runs processes in an existing container, reads its
state and CPU use, and pauses, unpauses and restarts it. It never creates or removes a container.

`DockerBackend` (docker_backend.py) is the real one. Tests use a fake with this same interface that runs real
processes in a directory per sandbox, so the file scripts, timeouts and pause rules are exercised for real.

Files, archives and snapshots all go through `exec` (tar, cat, rm as the sandbox's own user) rather than
Docker's archive endpoints: those read and write the container's image layer, under the tmpfs mounts where
the workspace lives (moby/moby#22020), and run as root instead of the sandbox's user.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import BinaryIO, Literal, Protocol

# Docker's own container states, as `docker inspect` names them; 'missing' when no such container exists.
ContainerStatus = Literal["created", "running", "paused", "restarting", "removing", "exited", "dead", "missing"]


class BackendError(Exception):
    """A backend failure the API reports with its message (never a traceback)."""


class DaemonUnavailable(BackendError):
    """Docker does not answer: the API answers 503 and changes nothing."""


class SandboxGone(BackendError):
    """The declared container does not exist on this host."""


class SandboxNotRunning(BackendError):
    """The container exists but cannot run a process now (paused, exited, restarting)."""


@dataclass(frozen=True)
class ContainerState:
    status: ContainerStatus
    exit_code: int | None = None
    started_at: str | None = None  # Docker's StartedAt; changes on every (re)start
    # Docker's Id and Created: a new container in the sandbox's name (an apply recreated it) has others.
    container_id: str | None = None
    created: str | None = None

    @property
    def running(self) -> bool:
        return self.status == "running"


@dataclass(frozen=True)
class ExecStatus:
    exit_code: int | None  # None: the deadline passed while the process was still running
    duration_ms: int


class Sink(Protocol):
    def write(self, data: bytes) -> object: ...


class CappedBuffer:
    """Keeps the first `limit` bytes written to it and counts the rest, so a chatty command cannot fill the
    runtime's memory while its exit status is still read."""

    def __init__(self, limit: int):
        self.limit = limit
        self.data = bytearray()
        self.dropped = 0

    def write(self, chunk: bytes) -> int:
        room = self.limit - len(self.data)
        self.data += chunk[:max(room, 0)]
        self.dropped += max(len(chunk) - max(room, 0), 0)
        return len(chunk)

    @property
    def truncated(self) -> bool:
        return self.dropped > 0


class SandboxBackend(ABC):
    """What the runtime needs from Docker, per container name."""

    @abstractmethod
    def state(self, name: str) -> ContainerState:
        """The container's current state ('missing' when it does not exist)."""

    def reconcile_states(self) -> None:
        """Any states this backend keeps between Docker's events held against Docker's own list (called by each
        monitor pass; sandstack.runtime.container_states)."""

    @abstractmethod
    def exec(self, name: str, argv: list[str], *, workdir: str, env: dict[str, str] | None = None,
             stdin: BinaryIO | None = None, stdout: Sink, stderr: Sink,
             timeout: float | None = None) -> ExecStatus:
        """Run `argv` in the running container as its own user, in `workdir`, with `env` added to the
        container's environment. `stdin` is sent and then closed; output is written to the sinks as it
        arrives. After `timeout` seconds the call returns with exit_code None and leaves the process running
        (the caller kills it). Raises SandboxNotRunning when the container is paused or stopped."""

    def stream(self, name: str, argv: list[str], *, workdir: str, env: dict[str, str] | None = None,
               timeout: float | None = None) -> ExecStream | None:
        """Start `argv` as `exec` does, without stdin, and hand back its stdout to pull; None when this backend has
        no way faster than `exec` (the caller runs `exec` in a thread writing into a pipe: exec_stream.PipedStream)."""
        return None

    def spawn(self, name: str, argv: list[str], *, workdir: str, env: dict[str, str], stdout: Sink, stderr: Sink,
              stdin: bool = False, tty: bool = False) -> ExecHandle:
        """Start `argv` as `exec` does and return at once: output goes to the sinks as it is written (with `tty`,
        all of it to `stdout`), stdin stays open when `stdin` (ExecHandle, below)."""
        raise BackendError(f"{type(self).__name__} cannot start a process that outlives the call")

    def last_exit(self, name: str, since: str | None) -> int | None:
        """The exit status of the container's last run that ended since `since` (a StartedAt), when Docker still
        tells it: a container its restart policy started again reads exit code 0 while it runs."""
        return None

    def tmpfs_sizes(self, name: str) -> dict[str, int]:
        """Each tmpfs path of the container and its size in bytes, as the container was made (a path without a
        size, or one this backend cannot tell, is left out)."""
        return {}

    @abstractmethod
    def cpu_usage_ns(self, name: str) -> int | None:
        """Total CPU time the container's processes used, in nanoseconds (None when it is not running)."""

    @abstractmethod
    def pause(self, name: str) -> None: ...

    @abstractmethod
    def unpause(self, name: str) -> None: ...

    @abstractmethod
    def restart(self, name: str) -> None:
        """Stop (if running) and start the container: its tmpfs paths come back empty, its processes are new."""

    @abstractmethod
    def stop(self, name: str) -> None: ...

    @abstractmethod
    def start(self, name: str) -> None:
        """Start a stopped container (one `stop` stopped): its tmpfs paths are new, its disk workspaces kept."""

    @abstractmethod
    def clean_workspaces(self, name: str, workspaces: list[WorkspaceReset]) -> None:
        """Empty the stopped container's disk workspaces with more rights than the sandbox has (a session's
        read-only directory, another user's file in the sticky root), keeping each one's `keep` names; fill a
        `seed` one again from the container's image as its creation did; check the result. Raises BackendError
        naming the path when one is not clean."""


    def resize(self, name: str, update: dict[str, int]) -> None:
        """Give the container (running or stopped) new limits: Docker's container update body (NanoCpus, Memory,
        MemorySwap, PidsLimit; sandstack.runtime.sizes). They stay across its restarts until the next resize."""
        raise BackendError(f"this backend cannot resize {name!r}")

    def reset_root(self, name: str) -> None:
        """Give the stopped container its image's root again (a template with a writable root): nothing a session
        changed outside its writable paths is left. Raises BackendError when it cannot (sandstack.runtime.rootfs)."""
        raise BackendError(f"this backend cannot reset the writable root of {name!r}")

    def read_root(self, name: str, out: Sink) -> None:
        """A tar of what the container changed in its writable root (overlay's upper directory: new and changed
        files, and a character device 0/0 for each removed one), written to `out` as it is read; the container may
        run. Raises BackendError when it cannot, or what `out` raises (sandstack.runtime.rootfs)."""
        raise BackendError(f"this backend cannot snapshot the writable root of {name!r}")

    def write_root(self, name: str, tar: BinaryIO) -> None:
        """`tar` (a checked read_root's) written into the stopped container's root after `reset_root` emptied it:
        its changes are back, owners, modes and whiteouts included. Raises BackendError when it cannot."""
        raise BackendError(f"this backend cannot restore the writable root of {name!r}")

    def address(self, name: str) -> str | None:
        """The running container's address on its (pool's) network, which the gateway sees as a request's source;
        None when it has none (stopped, no network)."""
        raise BackendError(f"this backend cannot tell the address of {name!r}")

    def set_profile(self, gateway: str, address: str, line: str | None, check: str = "") -> None:
        """Record in the gateway container's configuration volume the network profile of the sandbox at `address`
        (`line`: '<pool> <profile>'), whole (renamed into place), or remove its record (None: the start profile);
        then, with `check` ('<pool> <profile> <start>'), ask the gateway's own profile helper, as squid asks it, and
        require its OK: the gateway answers by the record from now on. Raises BackendError when it cannot."""
        raise BackendError(f"this backend cannot record a network profile in {gateway!r}")


@dataclass(frozen=True)
class WorkspaceReset:
    path: str  # where the sandbox mounts the disk workspace
    keep: tuple[str, ...]  # top-level names the filesystem owns (lost+found): kept
    seed: bool  # fill it again from the image's content at `path`


# A process started in a sandbox that runs on after the call that started it (`spawn`): its output is copied to
# sinks as it is written by a thread of the handle's own, its stdin stays open for writes, a terminal's size can be
# set. Blocking exec, background processes and terminals all run through it (sandstack.runtime.processes).
STDIN_TIMEOUT = 30  # seconds a terminal's keystrokes may wait for its process to read them


class StdinClosed(BackendError):
    """The process's stdin is closed (by the caller, or because the process ended)."""


class StdinBlocked(BackendError):
    """The process did not read its stdin within STDIN_TIMEOUT (a terminal's keystrokes)."""


class ExecHandle(ABC):
    """One running exec. `wait` returns once the output has ended and the process has exited (or the time is up);
    `close` releases the connection without ending the process (a kill goes through the marker, by the caller)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.ended: float | None = None
        self.exit_code: int | None = None  # None while running, or when Docker could not tell (container gone)

    @abstractmethod
    def write(self, data: bytes, timeout: float = STDIN_TIMEOUT) -> int:
        """Bytes to the process's stdin: what it takes within `timeout` seconds (0: what it takes now, without
        waiting), the count; raises StdinClosed."""

    @abstractmethod
    def close_stdin(self) -> None:
        """EOF on the process's stdin."""

    def resize(self, rows: int, cols: int) -> None:
        raise BackendError("this process has no terminal to resize")

    @abstractmethod
    def wait(self, timeout: float | None) -> bool:
        """True once the process has ended and its output has been copied; False when `timeout` passed first."""

    @abstractmethod
    def close(self) -> None:
        """Stop reading and release the connection."""

    @property
    def duration_ms(self) -> int:
        return int(((self.ended or time.monotonic()) - self.started) * 1000)


STDERR_KEPT = 8192  # bytes of an ExecStream's stderr kept for an error message


class ExecStream(ABC):
    """`read` until it gives b'', then `wait` for the exit code; `close` always (it releases the connection; a
    process still running is left to the caller to kill, by its marker)."""

    def __init__(self) -> None:
        self.stderr = CappedBuffer(STDERR_KEPT)

    @abstractmethod
    def read(self) -> bytes:
        """The next bytes of stdout (up to exec_stream.STEP, as many as came); b'' once it ended or the deadline passed."""

    @abstractmethod
    def wait(self) -> int | None:
        """After `read` gave b'': the exit code; None when the deadline passed first (the process may run on)."""

    @abstractmethod
    def close(self) -> None: ...
