"""The fake backend's `spawn` (sandstack.runtime.backend.ExecHandle): a real process on this machine, its pipes (or a
pseudo-terminal) read by threads into the sinks as it writes, its stdin a pipe kept open."""

from __future__ import annotations

import fcntl
import os
import posixpath
import pty
import select
import shutil
import signal
import struct
import subprocess
import termios
import threading
import time

from sandstack.runtime.backend import SandboxNotRunning
from sandstack.runtime.backend import STDIN_TIMEOUT, ExecHandle, StdinClosed
from sandstack.runtime.docker_exec import writable


class FakeHandle(ExecHandle):
    def __init__(self, backend, name: str, argv: list[str], *, workdir: str, env: dict[str, str], stdout, stderr,
                 stdin: bool, tty: bool):
        super().__init__()
        from tests.runtime.fake_backend import MARK, NO_CAPABILITIES

        status = backend._check("exec", name)
        if status != "running":
            raise SandboxNotRunning(f"container {name!r}: Container {name} is {status}")
        self.tty = tty
        cwd = backend.path(name, posixpath.normpath("/" + workdir))
        environ = {"PATH": os.environ["PATH"], "HOME": "/", **env, MARK: backend.mark}
        self._master, self._stdin_open, self._lock, self._done = None, stdin, threading.Lock(), threading.Event()
        if not cwd.is_dir() or ("/" not in argv[0] and shutil.which(argv[0]) is None) or "\0" in "".join(argv):
            # What Docker makes of a command that cannot start, as the fake's blocking exec answers it.
            self.proc, self._stdin_open = None, False
            self.exit_code = backend.exec(name, argv, workdir=workdir, env=env, stdout=stdout, stderr=stderr).exit_code
            self.ended = time.monotonic()
            self._done.set()
            return
        if tty:
            master, slave = pty.openpty()
            self.proc = subprocess.Popen([*NO_CAPABILITIES, *argv], cwd=cwd, env=environ, stdin=slave, stdout=slave,
                                         stderr=slave, start_new_session=True, close_fds=True,
                                         # its controlling terminal, as Docker's TTY exec has one
                                         preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
            os.close(slave)
            self._master = master
            sources = [(os.fdopen(os.dup(master), "rb", buffering=0), stdout)]
        else:
            self.proc = subprocess.Popen([*NO_CAPABILITIES, *argv], cwd=cwd, env=environ,
                                         stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
            sources = [(self.proc.stdout, stdout), (self.proc.stderr, stderr)]
        backend.procs[name].append(self.proc)
        self._readers = [threading.Thread(target=_copy, args=(source, sink), daemon=True) for source, sink in sources]
        for reader in self._readers:
            reader.start()
        threading.Thread(target=self._wait, daemon=True).start()

    def _wait(self) -> None:
        self.proc.wait()
        for reader in self._readers:
            reader.join(timeout=None if not self.tty else 1)
        self.exit_code, self.ended = self.proc.returncode, time.monotonic()
        if self.exit_code is not None and self.exit_code < 0:
            self.exit_code = 128 - self.exit_code  # a signal, as Docker reports it
        self._done.set()

    def write(self, data: bytes, timeout: float = STDIN_TIMEOUT) -> int:
        with self._lock:
            if not self._stdin_open and not self.tty or self._done.is_set():
                raise StdinClosed("stdin is closed")
            fd = self._master if self.tty else self.proc.stdin.fileno()
            deadline = time.monotonic() + timeout
            view, sent = memoryview(data), 0
            while sent < len(data):
                if not writable(fd, deadline - time.monotonic()):
                    break  # what it took within the time, as the Docker handle answers
                try:
                    # At most PIPE_BUF when writable: a pipe's write that size never blocks (a terminal's keystrokes
                    # are smaller still), and the pseudo-terminal's descriptor is shared with its reader's.
                    sent += os.write(fd, view[sent:sent + select.PIPE_BUF])
                except OSError as error:
                    self._stdin_open = False
                    raise StdinClosed("stdin is closed") from error
            return sent

    def close_stdin(self) -> None:
        with self._lock:
            if self.tty:
                os.write(self._master, b"\x04")
            elif self._stdin_open:
                self._stdin_open = False
                self.proc.stdin.close()

    def resize(self, rows: int, cols: int) -> None:
        if not self.tty:
            super().resize(rows, cols)
        fcntl.ioctl(self._master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.killpg(self.proc.pid, signal.SIGWINCH)

    def wait(self, timeout: float | None) -> bool:
        return self._done.wait(timeout)

    def close(self) -> None:
        if self._master is not None and self._done.is_set():
            os.close(self._master)
            self._master = None


def _copy(source, sink) -> None:
    try:
        while chunk := (source.read1(65536) if hasattr(source, "read1") else source.read(65536)):
            sink.write(chunk)
    except OSError:
        pass  # a pseudo-terminal's end once the process has gone (EIO)
    finally:
        source.close()
