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


def _flush(sinks: dict[int, Sink], kind: int, parts: list[memoryview]) -> None:
    if parts and kind in sinks:
        sinks[kind].write(b"".join(parts))
    parts.clear()


def copy_frames(sock: socket.socket, sinks: dict[int, Sink], deadline: float | None) -> bool:
    """Copies the frames to the sinks (by stream type; others are dropped) until the stream ends (True) or the
    deadline passes (False). A sink's own error ends the copy at once, raised as it is."""
    header = b""  # a header split between two pieces: its first bytes
    kind, left = 0, 0  # the current frame's stream type and the bytes of its payload still to come
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
            view, pos, parts = memoryview(data), 0, []
            while pos < len(data):
                if left:
                    take = min(left, len(data) - pos)
                    parts.append(view[pos:pos + take])
                    pos, left = pos + take, left - take
                    continue
                need = HEADER.size - len(header)
                header += data[pos:pos + need]
                pos += need
                if len(header) < HEADER.size:
                    break  # the rest of the header comes with the next piece
                new_kind, left = HEADER.unpack(header)
                header = b""
                if new_kind != kind:
                    _flush(sinks, kind, parts)  # the order of the streams' writes is kept
                    kind = new_kind
            _flush(sinks, kind, parts)
    except (TimeoutError, socket.timeout):
        return False
