"""Docker's multiplexed exec stream (an 8-byte header per frame: stream type, 3 zero bytes, big-endian length),
copied to the sinks of stdout and stderr.

The stream is read in large pieces (RECV at most per receive, whatever has arrived: a streamed line is never held
back) and split into frames in memory; consecutive frames of one stream within a piece go to its sink as one write.
A file of 100 MiB comes in frames of Docker's 32 KiB: read frame by frame, that was two receives, two copies and a
sink write (a pipe's write, for a download) per frame; now it is one receive and one write per piece.
"""

from __future__ import annotations

import socket
import struct
import time

from sandstack.runtime.backend import Sink

RECV = 1024 * 1024  # bytes asked of the socket per receive
HEADER = struct.Struct(">BxxxL")


class Frames:
    """The frames taken apart as pieces of the stream come, split anywhere (a header, a payload): `split` answers
    a piece's payloads as runs, each a stream type and its consecutive payloads (views of the piece), in order.
    Shared by the push copy below and the pull reader (sandstack.runtime.docker_stream)."""

    def __init__(self) -> None:
        self._header = b""  # a header split between two pieces: its first bytes
        self._kind, self._left = 0, 0  # the current frame's stream type and the bytes of its payload still to come

    def split(self, piece: memoryview) -> list[tuple[int, list[memoryview]]]:
        runs: list[tuple[int, list[memoryview]]] = []
        pos, size = 0, len(piece)
        while pos < size:
            if self._left:
                take = min(self._left, size - pos)
                if runs and runs[-1][0] == self._kind:
                    runs[-1][1].append(piece[pos:pos + take])
                else:
                    runs.append((self._kind, [piece[pos:pos + take]]))
                pos, self._left = pos + take, self._left - take
                continue
            need = HEADER.size - len(self._header)
            self._header += bytes(piece[pos:pos + need])
            pos += need
            if len(self._header) < HEADER.size:
                break  # the rest of the header comes with the next piece
            self._kind, self._left = HEADER.unpack(self._header)
            self._header = b""
        return runs


def copy_frames(sock: socket.socket, sinks: dict[int, Sink], deadline: float | None) -> bool:
    """Copies the frames to the sinks (by stream type; others are dropped) until the stream ends (True) or the
    deadline passes (False). A sink's own error ends the copy at once, raised as it is."""
    frames = Frames()
    if deadline is None:
        sock.settimeout(None)
    try:
        while True:
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                sock.settimeout(remaining)
            data = sock.recv(RECV)
            if not data:
                return True
            for kind, parts in frames.split(memoryview(data)):  # the order of the streams' writes is kept
                if kind in sinks:
                    sinks[kind].write(b"".join(parts))
    except (TimeoutError, socket.timeout):
        return False
