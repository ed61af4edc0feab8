"""A process in a container that outlives the call that started it (sandstack.runtime.backend.ExecHandle), on the Docker
Engine's exec API: `exec_create` (as the container's own user, with its stdin attached when asked, a TTY for a
terminal), `exec_start` on the hijacked socket, `exec_resize`, `exec_inspect` for the exit code.

A thread reads the socket and writes each frame to its sink as it comes (the Engine multiplexes stdout and stderr
with an 8-byte header; a TTY's stream is raw), so a follower sees a line as soon as the command writes it. Writes
to stdin go to the same socket, never waiting past their timeout on a process that does not read (a process's
stdin route does not wait at all: sandstack.runtime.processes holds the rest).
"""

from __future__ import annotations

import select
import socket
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import docker
import requests

from sandstack.runtime.backend import (
    STDIN_TIMEOUT,
    BackendError,
    DaemonUnavailable,
    ExecHandle,
    SandboxGone,
    SandboxNotRunning,
    Sink,
    StdinClosed,
)
from sandstack.runtime.frames import copy_frames

INSPECT_BACKOFF = (0.002, 0.5)  # seconds between exit-code polls once the stream ended: first, most
STDOUT, STDERR = 1, 2
CHUNK = 64 * 1024


@contextmanager
def docker_errors(name: str) -> Iterator[None]:
    """Docker's exceptions as the backend's: the API turns these into 404/409/503 answers."""
    try:
        yield
    except docker.errors.NotFound as error:
        raise SandboxGone(f"container {name!r} does not exist on this host") from error
    except docker.errors.APIError as error:
        if error.status_code == 409:
            raise SandboxNotRunning(f"container {name!r}: {error.explanation}") from error
        raise BackendError(f"container {name!r}: Docker said {error.explanation}") from error
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout, ConnectionError) as error:
        raise DaemonUnavailable(f"the Docker daemon does not answer ({type(error).__name__})") from error
    except docker.errors.DockerException as error:
        raise DaemonUnavailable(f"the Docker daemon does not answer ({error})") from error


class DockerHandle(ExecHandle):
    def __init__(self, api: docker.APIClient, name: str, argv: list[str], *, workdir: str, env: dict[str, str],
                 stdout: Sink, stderr: Sink, stdin: bool, tty: bool):
        super().__init__()
        self.api, self.name, self.tty = api, name, tty
        with docker_errors(name):
            self.exec_id = api.exec_create(name, argv, stdin=stdin, tty=tty, environment=env or None,
                                           workdir=workdir)["Id"]
            raw = api.exec_start(self.exec_id, socket=True, tty=tty)
        self._raw = raw  # the SDK's wrapper owns the descriptor: kept alive as long as the socket is used
        self.sock: socket.socket = getattr(raw, "_sock", raw)
        self.sock.settimeout(None)
        self._stdin_open = stdin
        self._send = threading.Lock()
        self._closed = False
        self._done = threading.Event()
        self._reader = threading.Thread(target=self._read, args=(stdout, stderr), daemon=True,
                                        name=f"sandstack-exec-{name}")
        self._reader.start()

    def _read(self, stdout: Sink, stderr: Sink) -> None:
        try:
            if self.tty:
                while chunk := self.sock.recv(CHUNK):
                    stdout.write(chunk)
            else:
                copy_frames(self.sock, {STDOUT: stdout, STDERR: stderr}, None)
        except (OSError, ValueError):
            pass  # closed on this side, or the daemon went away: the exit code below says what it knows
        delay, longest = INSPECT_BACKOFF
        while not self._closed:
            try:
                with docker_errors(self.name):
                    info = self.api.exec_inspect(self.exec_id)
            except Exception:  # the container or the daemon is gone: no exit code to be had
                break
            if not info.get("Running"):
                self.exit_code = info.get("ExitCode")
                break
            time.sleep(delay)  # the output ended (closed by the process) but it runs on: look again
            delay = min(delay * 2, longest)
        self.ended = time.monotonic()
        self._done.set()

    def write(self, data: bytes, timeout: float = STDIN_TIMEOUT) -> int:
        with self._send:
            if not self._stdin_open or self._done.is_set():
                raise StdinClosed("stdin is closed")
            view, sent = memoryview(data), 0
            deadline = time.monotonic() + timeout
            while sent < len(data):
                try:
                    sent += self.sock.send(view[sent:], socket.MSG_DONTWAIT)
                    continue
                except BlockingIOError:
                    pass
                except OSError as error:
                    self._stdin_open = False
                    raise StdinClosed(f"stdin is closed ({error.strerror or error})") from error
                left = deadline - time.monotonic()
                if left <= 0 or not writable(self.sock.fileno(), left):
                    break  # what it took within the time: the caller says what happens to the rest
            return sent

    def close_stdin(self) -> None:
        with self._send:
            if self._stdin_open:
                self._stdin_open = False
                try:
                    self.sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

    def resize(self, rows: int, cols: int) -> None:
        if not self.tty:
            super().resize(rows, cols)
        with docker_errors(self.name):
            self.api.exec_resize(self.exec_id, height=rows, width=cols)

    def wait(self, timeout: float | None) -> bool:
        return self._done.wait(timeout)

    def close(self) -> None:
        self._closed = True
        shut(self.sock)
        self._reader.join(timeout=5)
        self._done.set()


def writable(fd: int, timeout: float) -> bool:
    """Whether `fd` takes a write within `timeout` seconds. poll, not select: select() refuses a descriptor past
    1023, which a runtime with many connections and execs open reaches (the fake backend's tests met it)."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return bool(poller.poll(max(timeout, 0) * 1000))


def shut(sock: socket.socket) -> None:
    """Shut down, then closed: the SDK's file wrapper keeps the descriptor open past close(), and a stream cut off at
    a bound would stay open, the daemon blocked writing into it (and the container's next exec with it)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
