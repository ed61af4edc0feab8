"""A process started in a sandbox that runs on after the call that started it: its output is copied to sinks
as it is written, by a thread of the handle's own; its stdin stays open for writes; a terminal's size can be set.

`SandboxBackend.spawn` makes one (the Docker backend's: sandstack.runtime.docker_exec). Blocking exec, background
processes and terminals all run through it (sandstack.runtime.processes), so they share one way of starting,
confining (the sandbox's own user, its environment marker) and ending a command.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod

from sandstack.runtime.backend import BackendError

STDIN_TIMEOUT = 30  # seconds a write to stdin may wait for the process to read


class StdinClosed(BackendError):
    """The process's stdin is closed (by the caller, or because the process ended)."""


class StdinBlocked(BackendError):
    """The process did not read its stdin within STDIN_TIMEOUT."""


class ExecHandle(ABC):
    """One running exec. `wait` returns once the output has ended and the process has exited (or the time is up);
    `close` releases the connection without ending the process (a kill goes through the marker, by the caller)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.ended: float | None = None
        self.exit_code: int | None = None  # None while running, or when Docker could not tell (container gone)

    @abstractmethod
    def write(self, data: bytes) -> None:
        """Bytes to the process's stdin; raises StdinClosed or StdinBlocked."""

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
