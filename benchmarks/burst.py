"""A burst of HTTP requests sent in one instant, each timed from the moment ITS request is written to the moment its
answer has arrived whole.

Why not threads and an HTTP client: 200 threads in one Python process, each sending through httpx, measure the
process as much as the server. A claim's client work (building the request, httpx and httpcore, parsing the answer)
is ~0.85 ms of CPU under one interpreter lock, so the 200th thread cannot even write its request before ~170 ms of
the other threads' client CPU, and its clock already runs while it waits; 200 agent platforms' sessions do not share
one interpreter. Here every connection is opened (and used once, so the server holds it) and every request serialised
before the instant; then one thread writes the requests one after another (a write is a few microseconds: 200 go out
within a few milliseconds) and reads the answers as they come with one selector, so what a request's time holds is
the network and the server, not other requests' client work.

Only what a JSON API's answers need is parsed: a status line, headers, and a body of `Content-Length` bytes (the
runtime never answers chunked).
"""

from __future__ import annotations

import json
import select
import selectors
import socket
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    ms: float  # its request's write to its answer's last byte

    def json(self) -> Any:
        return json.loads(self.body)


def request(method: str, path: str, host: str, headers: dict[str, str], body: Any = None) -> bytes:
    """One HTTP/1.1 request, serialised (a JSON body when `body` is not None), on a kept-alive connection."""
    data = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in headers.items())]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


class _Reader:
    """One answer read from its socket as its bytes come."""

    def __init__(self) -> None:
        self.buffer = b""
        self.length: int | None = None
        self.head_end = -1
        self.status = 0

    def feed(self, data: bytes) -> bool:
        """True once the whole answer is in."""
        self.buffer += data
        if self.length is None:
            self.head_end = self.buffer.find(b"\r\n\r\n")
            if self.head_end < 0:
                return False
            head = self.buffer[:self.head_end].decode("latin-1").split("\r\n")
            self.status = int(head[0].split(" ", 2)[1])
            fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:])}
            if "content-length" not in fields:
                raise RuntimeError(f"an answer without Content-Length (status {self.status}): {head}")
            self.length = int(fields["content-length"])
        return len(self.buffer) - self.head_end - 4 >= self.length

    def body(self) -> bytes:
        start = self.head_end + 4
        return self.buffer[start:start + (self.length or 0)]


def _exchange(sock: socket.socket, data: bytes, timeout: float) -> _Reader:
    sock.settimeout(timeout)
    sock.sendall(data)
    reader = _Reader()
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("the server closed the connection before its answer")
        if reader.feed(chunk):
            return reader


def burst(address: tuple[str, int], requests: list[bytes], *, warmup: bytes | None = None,
          timeout: float = 300.0) -> list[Answer]:
    """Each of `requests` on a connection of its own, all written in one instant; their answers in the same order.
    `warmup`: a request sent (and answered) on every connection before the instant, so that the server has accepted
    and set up each one (not part of any request's time)."""
    socks = []
    try:
        for _ in requests:
            sock = socket.create_connection(address, timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            socks.append(sock)
        if warmup is not None:
            for sock in socks:
                _exchange(sock, warmup, timeout)
        for sock in socks:
            sock.setblocking(False)
        readers = [_Reader() for _ in requests]
        started = [0.0] * len(requests)
        done: dict[int, float] = {}
        selector = selectors.DefaultSelector()
        for index, (sock, data) in enumerate(zip(socks, requests)):
            started[index] = time.perf_counter()
            view = memoryview(data)
            while view:  # a request is a few hundred bytes: the socket's buffer takes it at once
                try:
                    view = view[sock.send(view):]
                except BlockingIOError:
                    select.select([], [sock], [], timeout)
            selector.register(sock, selectors.EVENT_READ, index)
        deadline = time.monotonic() + timeout
        while len(done) < len(requests):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{len(requests) - len(done)} of {len(requests)} answers not in within "
                                   f"{timeout:g} s")
            for key, _ in selector.select(left):
                index = key.data
                chunk = key.fileobj.recv(65536)  # type: ignore[union-attr]
                if not chunk:
                    raise RuntimeError(f"request {index}: the server closed the connection before its answer")
                if readers[index].feed(chunk):
                    done[index] = time.perf_counter()
                    selector.unregister(key.fileobj)
        selector.close()
        return [Answer(r.status, r.body(), (done[i] - started[i]) * 1000) for i, r in enumerate(readers)]
    finally:
        for sock in socks:
            sock.close()
