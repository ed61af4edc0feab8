"""The transfer relay's steps, without Docker: Docker's exec stream read in large pieces (frames split anywhere
between two receives, one write per run of one stream), a download answered in full 1 MiB steps, and a large
upload sent by the sync client in 1 MiB views with its length declared."""

from __future__ import annotations

import os
import struct
import time
from types import SimpleNamespace

import httpx

from sandstack.client import HostClient, HostEndpoint
from sandstack.client.retry import Retry
from sandstack.runtime.files_stream import CHUNK, open_read
from sandstack.runtime.frames import copy_frames
from tests.runtime.conftest import make_env

MIB = 1024 * 1024
OUT, ERR = 1, 2


def frame(kind: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", kind, len(data)) + data


class Pieces:
    """A socket that hands out the stream in exactly these pieces, one per receive."""

    def __init__(self, *pieces: bytes):
        self.pieces = list(pieces)
        self.receives = 0

    def settimeout(self, value) -> None:
        pass

    def recv(self, size: int) -> bytes:
        self.receives += 1
        return self.pieces.pop(0) if self.pieces else b""


class Writes:
    def __init__(self):
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.writes.append(bytes(data))
        return len(data)


def test_frames_split_anywhere_between_receives_come_out_whole_and_in_order():
    stream = frame(OUT, b"hello ") + frame(ERR, b"oops") + frame(OUT, b"world") + frame(OUT, b"") + frame(ERR, b"!")
    # Cut inside the first header, inside a payload and right after a header.
    cuts = [3, 11, len(frame(OUT, b"hello ")) + 8, len(stream) - 1]
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]
    out, err = Writes(), Writes()
    assert copy_frames(Pieces(*pieces), {OUT: out, ERR: err}, None) is True
    assert (b"".join(out.writes), b"".join(err.writes)) == (b"hello world", b"oops!")


def test_consecutive_frames_of_one_stream_in_one_receive_are_one_write():
    # Docker sends a file's bytes in 32 KiB frames: 32 frames in one receive were 32 writes (a pipe's each).
    data = os.urandom(MIB)
    stream = b"".join(frame(OUT, data[i:i + 32768]) for i in range(0, MIB, 32768))
    out, err = Writes(), Writes()
    sock = Pieces(stream + frame(ERR, b"done\n") + frame(OUT, b"tail"))
    assert copy_frames(sock, {OUT: out, ERR: err}, None) is True
    assert ([len(w) for w in out.writes], out.writes[0] == data, out.writes[1], err.writes) == (
        [MIB, 4], True, b"tail", [b"done\n"])
    assert sock.receives == 2  # the stream, then its end


def test_a_frame_of_another_stream_type_is_dropped():
    out = Writes()
    assert copy_frames(Pieces(frame(0, b"stdin echo") + frame(OUT, b"kept")), {OUT: out}, None) is True
    assert out.writes == [b"kept"]


def test_a_downloaded_file_comes_in_full_1_mib_steps(tmp_path):
    env = make_env(tmp_path)
    try:
        sandbox = env.claim("chat-1")["sandbox"]
        data = os.urandom(3 * MIB + 5)
        (env.backend.path(sandbox, "/workspace") / "big.bin").write_bytes(data)
        opened = open_read(env.runtime.files, sandbox, "big.bin")
        chunks = list(opened.chunks)
        # The fake backend writes its pipe in 64 KiB pieces, as Docker's frames come: read1 answered each. The
        # first step is what followed the header in the first MiB read.
        header = len(f"F {len(data)}\n")
        assert (CHUNK, opened.size, [len(c) for c in chunks]) == (
            MIB, len(data), [MIB - header, MIB, MIB, 5 + header])
        assert b"".join(chunks) == data
    finally:
        env.backend.close()
        env.audit.close()


def test_the_sync_client_sends_a_large_body_in_1_mib_views_with_its_length_and_again_whole_on_a_retry():
    data = os.urandom(2 * MIB + 3)
    seen: list[tuple[list[int], str | None, str | None, bytes]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        pieces = [bytes(piece) for piece in request.stream]
        seen.append(([len(p) for p in pieces], request.headers.get("content-length"),
                     request.headers.get("transfer-encoding"), b"".join(pieces)))
        if len(seen) == 1:
            raise httpx.WriteError("broken", request=request)
        return httpx.Response(204)

    class Transport(httpx.BaseTransport):  # as it goes out: httpx's MockTransport reads the body whole first
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            return handler(request)

    host = HostClient(HostEndpoint("h", "http://h.test", "t" * 24), retry=Retry(3, 0.001, 0.001),
                      http_factory=lambda e, t, h: httpx.Client(base_url=e.url, transport=Transport()))
    host.write_file("sb", "big.bin", data)
    expected = ([MIB, MIB, 3], str(len(data)), None, data)
    assert seen == [expected, expected]
    # A small body goes as it is: one piece.
    seen.clear()
    host.write_file("sb", "small.txt", b"x" * 10)
    assert seen[0][:3] == ([10], "10", None)


def test_an_internal_exec_looks_for_its_exit_code_again_after_2_ms_not_20(monkeypatch):
    import socket

    from sandstack.runtime import docker_backend
    from sandstack.runtime.backend import CappedBuffer

    daemon, runtime = socket.socketpair()
    daemon.sendall(frame(OUT, b"F 3\nabc"))
    daemon.close()  # the stream ends; Docker marks the exec ended a moment later
    answers = iter([{"Running": True, "ExitCode": None}, {"Running": True, "ExitCode": None},
                    {"Running": False, "ExitCode": 0}])

    class Api:
        def exec_create(self, name, argv, **kw):
            return {"Id": "e1"}

        def exec_start(self, exec_id, socket):
            return runtime

        def exec_inspect(self, exec_id):
            return next(answers)

    slept: list[float] = []
    monkeypatch.setattr(docker_backend, "time", SimpleNamespace(sleep=slept.append, monotonic=time.monotonic))
    backend = docker_backend.DockerBackend()
    backend._api = Api()
    out = CappedBuffer(100)
    status = backend.exec("sb", ["cat"], workdir="/", stdout=out, stderr=CappedBuffer(100))
    assert (status.exit_code, bytes(out.data), slept) == (0, b"F 3\nabc", [0.002, 0.004])
