"""An exec's stdout read from Docker's attached socket by the caller's own thread (sandstack.runtime.exec_stream):
the frames (an 8-byte header each: stream type, 3 zero bytes, big-endian length) are taken apart in memory, stdout's
payloads handed back joined, stderr's kept capped.

Docker writes a file's bytes in frames of 32 KiB, each on its own, and a receive wakes up for each: 3,200 wake-ups
per 100 MiB, each a hand-over when another thread waits for it. On a plain socket (a unix socket, or TCP) a receive
here asks for a whole MiB with MSG_WAITALL on a blocking socket, so the kernel gathers the frames and the thread
wakes up once per MiB; the deadline is the socket's SO_RCVTIMEO (a Python socket timeout would poll first and take
whatever came). A TLS or ssh socket is read as it comes, with a socket timeout.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Callable

from sandstack.runtime.backend import DaemonUnavailable, ExecStream
from sandstack.runtime.docker_exec import shut
from sandstack.runtime.exec_stream import STEP
from sandstack.runtime.frames import Frames

STDOUT, STDERR = 1, 2


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    return struct.pack("ll", whole, max(int((seconds - whole) * 1_000_000), 1 if not whole else 0))


class DockerStream(ExecStream):
    """`sock`: the exec's attached stream; `deadline`: time.monotonic() past which reads end (None: none);
    `status`: the exit code once the stream ended (exec_inspect); `keep`: what owns the socket's descriptor."""

    def __init__(self, sock: socket.socket, name: str, deadline: float | None, status: Callable[[], int | None],
                 keep: object = None):
        super().__init__()
        self.sock, self.name, self.deadline, self._status, self._keep = sock, name, deadline, status, keep
        self._plain = type(sock) is socket.socket  # TLS and ssh sockets take no MSG_WAITALL
        self._buffer = bytearray(STEP)
        self._view = memoryview(self._buffer)
        self._frames = Frames()
        self.ended = False  # the stream ended (not the deadline)
        self.timed_out = False
        if self._plain:
            sock.settimeout(None)  # blocking: MSG_WAITALL waits in the kernel, SO_RCVTIMEO bounds the wait

    def read(self) -> bytes:
        while not (self.ended or self.timed_out):
            piece = self._receive()
            if piece is None:
                break
            if not piece:
                self.ended = True
                break
            out = self._split(piece)
            if out:
                return out
        return b""

    def _receive(self) -> memoryview | None:
        """What came next (empty at the end of the stream); None once the deadline passed."""
        left = None if self.deadline is None else self.deadline - time.monotonic()
        if left is not None and left <= 0:
            self.timed_out = True
            return None
        try:
            if self._plain:
                if left is not None:
                    self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(left))
                try:
                    # Partial at the end of the stream or at the deadline; the next receive says which.
                    return self._view[:self.sock.recv_into(self._buffer, STEP, socket.MSG_WAITALL)]
                except BlockingIOError:  # SO_RCVTIMEO passed with nothing received
                    self.timed_out = True
                    return None
            self.sock.settimeout(left)
            try:
                return memoryview(self.sock.recv(STEP))
            except (TimeoutError, socket.timeout):
                self.timed_out = True
                return None
        except OSError as error:
            raise DaemonUnavailable(f"the exec stream of {self.name!r} broke ({error})") from error

    def _split(self, piece: memoryview) -> bytes:
        """stdout's payloads in `piece`, joined (the buffer is received into again); stderr's to self.stderr."""
        out: list[memoryview] = []
        for kind, parts in self._frames.split(piece):
            if kind == STDOUT:
                out += parts
            elif kind == STDERR:
                self.stderr.write(b"".join(parts))
        return b"".join(out)

    def wait(self) -> int | None:
        if not self.ended:
            return None
        return self._status()

    def close(self) -> None:
        shut(self.sock)
        self._keep = None
