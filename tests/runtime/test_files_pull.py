"""A download pulled by its own answer (no Docker): Docker's exec stream read by the caller's thread (frames split
anywhere, one receive per MiB on a plain socket, stderr kept apart, the exit code after the end, the deadline),
and the read script bounded, killed when the answer ends early, its marker and lease held until then."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

import pytest

from sandstack.runtime.docker_stream import STDERR, STDOUT, DockerStream
from sandstack.runtime import files_stream
from sandstack.runtime.exec_stream import PipedStream
from sandstack.runtime.files_stream import open_read
from sandstack.runtime.tarcheck import PastBound
from tests.runtime.conftest import make_config, make_env

MIB = 1024 * 1024


def frame(kind: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", kind, len(data)) + data


class Pieces:
    """A socket that is not a plain one (as TLS's or ssh's), handing out exactly these pieces, one per receive."""

    def __init__(self, *pieces: bytes):
        self.pieces = list(pieces)
        self.closed = False

    def settimeout(self, value) -> None:
        pass

    def recv(self, size: int) -> bytes:
        return self.pieces.pop(0) if self.pieces else b""

    def shutdown(self, how) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def drain(stream: DockerStream) -> list[bytes]:
    chunks = []
    while chunk := stream.read():
        chunks.append(chunk)
    return chunks


def test_frames_split_anywhere_come_out_whole_with_stderr_apart_and_the_exit_code_after_the_end():
    data = frame(STDOUT, b"F 11\n") + frame(STDERR, b"warn ") + frame(STDOUT, b"hello world") + frame(0, b"x") \
        + frame(STDERR, b"done")
    cuts = [3, 9, 20, len(frame(STDOUT, b"F 11\n")) + 8, len(data) - 2]  # inside headers, payloads, after a header
    sock = Pieces(*[data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])])
    codes = iter([0])
    stream = DockerStream(sock, "sb", None, lambda: next(codes))
    assert b"".join(drain(stream)) == b"F 11\nhello world"
    assert (stream.wait(), bytes(stream.stderr.data)) == (0, b"warn done")
    stream.close()
    assert sock.closed


def test_a_plain_socket_is_read_a_whole_mib_at_a_time_however_docker_frames_it():
    daemon, runtime = socket.socketpair()
    data = os.urandom(3 * MIB)
    stream_bytes = b"".join(frame(STDOUT, data[i:i + 32768]) for i in range(0, len(data), 32768))

    def send() -> None:  # as dockerd does: one frame per write
        for i in range(0, len(stream_bytes), 32768 + 8):
            daemon.sendall(stream_bytes[i:i + 32768 + 8])
        daemon.close()

    sender = threading.Thread(target=send)
    sender.start()
    stream = DockerStream(runtime, "sb", time.monotonic() + 600, lambda: 0)
    chunks = drain(stream)
    sender.join()
    stream.close()
    assert b"".join(chunks) == data
    # Each receive filled the 1 MiB buffer (less the frames' headers in it), not one 32 KiB frame each.
    headers = 8 * (MIB // (32768 + 8) + 1)
    assert all(len(c) >= MIB - headers for c in chunks[:-1]) and len(chunks) <= 4, [len(c) for c in chunks]


def test_a_stream_open_at_its_deadline_ends_without_an_exit_code():
    daemon, runtime = socket.socketpair()
    daemon.sendall(frame(STDOUT, b"partial"))
    stream = DockerStream(runtime, "sb", time.monotonic() + 0.3, lambda: pytest.fail("inspected a running exec"))
    assert drain(stream) == [b"partial"]
    assert (stream.timed_out, stream.wait()) == (True, None)
    stream.close()
    daemon.close()


@pytest.fixture
def small(tmp_path):
    config = make_config()
    pools = {name: pool.__class__(**{**pool.__dict__, "download_limit_bytes": 3 * MIB})
             for name, pool in config.pools.items()}
    env = make_env(tmp_path, config.__class__(**{**config.__dict__, "pools": pools}))
    yield env, env.claim("chat-1")["sandbox"]
    env.backend.close()
    env.audit.close()


def endless(env, monkeypatch) -> list[str]:
    """The backend's read script swapped for one announcing 10 bytes and writing without end; the markers of the
    runtime's kills, recorded."""
    kills: list[str] = []
    # The fake backend has no direct reader: its exec is piped (exec_stream.PipedStream), here with the swapped script.
    monkeypatch.setattr(files_stream, "PipedStream", lambda backend, name, argv, **kw: PipedStream(
        backend, name, ["sh", "-c", 'printf "F 10\\n"; exec yes'], **kw))
    kill = env.runtime.transfers.kill
    monkeypatch.setattr(env.runtime.transfers, "kill", lambda name, marker: (kills.append(marker),
                                                                             kill(name, marker)))
    return kills


def test_a_stream_past_the_download_limit_is_cut_there_and_its_script_killed(small, monkeypatch):
    env, sandbox = small
    kills = endless(env, monkeypatch)
    opened = open_read(env.runtime.files, sandbox, "any")
    assert opened.size == 10
    with pytest.raises(PastBound):
        for _ in opened.chunks:
            assert env.runtime.live_markers() and env.runtime.leases.in_use(sandbox)  # held while it streams
    assert len(kills) == 1 and kills[0].startswith("internal-")
    assert all(proc.poll() is not None for proc in env.backend.procs[sandbox])  # `yes` was killed
    assert (env.runtime.live_markers(), env.runtime.leases.in_use(sandbox)) == ([], False)


def test_an_answer_left_early_kills_its_script_and_releases_the_sandbox(small, monkeypatch):
    env, sandbox = small
    kills = endless(env, monkeypatch)
    opened = open_read(env.runtime.files, sandbox, "any")
    next(opened.chunks)
    opened.chunks.close()  # the client went away
    assert len(kills) == 1
    assert all(proc.poll() is not None for proc in env.backend.procs[sandbox])
    assert (env.runtime.live_markers(), env.runtime.leases.in_use(sandbox)) == ([], False)


def test_a_read_to_the_end_kills_nothing_and_keeps_no_marker(small, monkeypatch):
    env, sandbox = small
    kills: list[str] = []
    monkeypatch.setattr(env.runtime.transfers, "kill", lambda name, marker: kills.append(marker))
    (env.backend.path(sandbox, "/workspace") / "f.txt").write_bytes(b"content")
    opened = open_read(env.runtime.files, sandbox, "f.txt")
    assert (opened.size, b"".join(opened.chunks), kills) == (7, b"content", [])
    assert (env.runtime.live_markers(), env.runtime.leases.in_use(sandbox)) == ([], False)
    # A missing file: its exit status says 404, and nothing is held after it.
    response = env.api.get(f"/v1/sandboxes/{sandbox}/files/missing.txt")
    assert response.status_code == 404 and "missing.txt" in response.json()["error"]
    assert (env.runtime.live_markers(), env.runtime.leases.in_use(sandbox)) == ([], False)
