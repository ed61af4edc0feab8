"""DockerBackend's exec stream reader, on a socket pair standing in for the daemon's attached stream (no
Docker): frames demultiplexed into stdout and stderr, the end of stream, and the deadline."""

from __future__ import annotations

import socket
import struct
import time

from sandstack.runtime.backend import CappedBuffer
from sandstack.runtime.docker_backend import STDERR, STDOUT, copy_frames


def frame(kind: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", kind, len(data)) + data


def test_frames_are_split_into_stdout_and_stderr_until_the_stream_ends():
    daemon, runtime = socket.socketpair()
    daemon.sendall(frame(STDOUT, b"out-1 ") + frame(STDERR, b"err") + frame(STDOUT, b"out-2"))
    daemon.close()
    out, err = CappedBuffer(8), CappedBuffer(100)
    assert copy_frames(runtime, {STDOUT: out, STDERR: err}, deadline=None) is True
    assert (bytes(out.data), out.dropped, bytes(err.data)) == (b"out-1 ou", 3, b"err")


def test_a_stream_still_open_at_the_deadline_returns_false():
    daemon, runtime = socket.socketpair()
    daemon.sendall(frame(STDOUT, b"partial"))
    started = time.monotonic()
    out = CappedBuffer(100)
    assert copy_frames(runtime, {STDOUT: out, STDERR: CappedBuffer(1)}, deadline=time.monotonic() + 0.3) is False
    # Not before the deadline; after it, as soon as the machine gets to it (the upper bound only says it did not
    # wait for the stream's end, which never comes here).
    assert 0.25 < time.monotonic() - started < 60
    assert bytes(out.data) == b"partial"
    daemon.close()
