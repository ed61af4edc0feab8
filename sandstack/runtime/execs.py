"""The runtime's own scripts in a sandbox, and the markers of every exec running now.

Each exec carries an environment marker (scripts.MARKER_ENV): a kill ends the processes carrying one marker and their
descendants (scripts.KILL_EXEC), and a timed-out command's kill spares only processes carrying the marker of another
exec still running. So the markers of the execs running now are kept here, the runtime's own scripts (file moves,
restores, kills) carry an `internal-` marker, and they run on the system's PATH, never one the sandbox can write to.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from contextlib import contextmanager
from typing import BinaryIO, Iterator

from sandstack.runtime import scripts
from sandstack.runtime.backend import BackendError, CappedBuffer, SandboxBackend, Sink

KILL_TIMEOUT = 15  # seconds for the exec that kills a command's processes
SCRIPT_TIMEOUT = 300  # seconds one of the runtime's own scripts may take


class Execs:
    def __init__(self, backend: SandboxBackend):
        self.backend = backend
        self._lock = threading.Lock()
        self._live: Counter[str] = Counter()

    def mark(self, marker: str) -> None:
        with self._lock:
            self._live[marker] += 1

    def unmark(self, marker: str) -> None:
        with self._lock:
            self._live[marker] -= 1
            if self._live[marker] <= 0:
                del self._live[marker]

    @contextmanager
    def marked(self, marker: str) -> Iterator[None]:
        self.mark(marker)
        try:
            yield
        finally:
            self.unmark(marker)

    def markers(self) -> list[str]:
        """The markers of the execs running now."""
        with self._lock:
            return sorted(self._live)

    def run(self, name: str, argv: list[str], workdir: str, *, stdin: BinaryIO | None = None,
            stdout: Sink | None = None, timeout: float = SCRIPT_TIMEOUT,
            marker: str | None = None) -> tuple[int | None, str]:
        """One of the runtime's own scripts; (exit code, stderr). Marked as the runtime's own (a user's timed-out
        command's kill leaves it alone), on the system's PATH (not one the sandbox can write to)."""
        err = CappedBuffer(8192)
        marker = marker or f"internal-{uuid.uuid4().hex}"
        with self.marked(marker):
            status = self.backend.exec(name, argv, workdir=workdir, stdin=stdin,
                                       env={scripts.MARKER_ENV: marker, "PATH": scripts.SYSTEM_PATH},
                                       stdout=stdout if stdout is not None else CappedBuffer(8192), stderr=err,
                                       timeout=timeout)
        return status.exit_code, err.data.decode(errors="replace").strip()

    def kill(self, name: str, marker: str, since: str = "", *, spare_running: bool = True) -> None:
        """SIGKILL to every process carrying `marker` and their descendants (with `since`, a start on the kernel's
        boot clock, also what was orphaned since: scripts.KILL_EXEC); `spare_running`: not a process carrying the
        marker of another exec running now. Raises BackendError when the kill cannot run."""
        spared = self.markers() if spare_running else []
        self.run(name, scripts.sh(scripts.KILL_EXEC, marker, since, *spared), "/", timeout=KILL_TIMEOUT)

    def kill_quietly(self, name: str, marker: str) -> None:
        """The same, for a script cut off on this side: a sandbox that stopped or is gone has nothing left to kill."""
        try:
            self.kill(name, marker)
        except BackendError:
            pass
