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
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    ms: float  # its request's write to its answer's last byte
    at: float  # time.perf_counter() at its answer's last byte

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


class CpuSampler:
    """CPU time, sampled every `every` seconds in a thread while a burst runs: the machine's (every process's, from
    /proc/stat), one process's with its cgroup's (the runtime's container), this process's, and the Docker daemon's
    (dockerd and containerd, by name; their per-container shims and runc are too many to sample and stay in the
    machine's rest), so the window up to a burst's last answer of interest can be split between them."""

    DAEMONS = ("dockerd", "containerd")

    def __init__(self, pid: int | None, every: float = 0.02):
        self.cgroup = _cgroup_usage_file(pid) if pid else None
        self.daemons = _pids_named(self.DAEMONS)
        self.every = every
        self.samples: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "CpuSampler":
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()  # the last sample after the last answer

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def _sample(self) -> None:
        self.samples.append({"at": time.perf_counter(), "machine": _machine_busy(),
                             "cgroup": _cgroup_seconds(self.cgroup), "own": time.process_time(),
                             "daemon": sum(_process_seconds(pid) for pid in self.daemons)})

    def between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds from the last sample at or before `start` to the first at or after `end` ("wall": that span)."""
        first = max((s for s in self.samples if s["at"] <= start), default=self.samples[0], key=lambda s: s["at"])
        last = min((s for s in self.samples if s["at"] >= end), default=self.samples[-1], key=lambda s: s["at"])
        used = {key: last[key] - first[key] for key in first if key != "at"}
        return {"wall": last["at"] - first["at"], **used}


def _pids_named(names: tuple[str, ...]) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() in names:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _process_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy() -> float:
    """Seconds of CPU every core has spent busy since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    busy = sum(fields[:8]) - fields[3] - fields[4]
    return busy / os.sysconf("SC_CLK_TCK")


def _cgroup_usage_file(pid: int) -> Path | None:
    """The CPU usage file of `pid`'s cgroup (v1 cpuacct.usage in ns, or v2 cpu.stat's usage_usec)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):
            return Path("/sys/fs/cgroup/cpuacct") / path.lstrip("/") / "cpuacct.usage"
    for line in lines:
        if line.startswith("0::"):
            return Path("/sys/fs/cgroup") / line[3:].lstrip("/") / "cpu.stat"
    return None


def _cgroup_seconds(usage: Path | None) -> float:
    if usage is None:
        return float("nan")
    try:
        text = usage.read_text()
    except OSError:
        return float("nan")
    if usage.name == "cpu.stat":
        return next(int(line.split()[1]) for line in text.splitlines() if line.startswith("usage_usec")) / 1e6
    return int(text) / 1e9


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
        return [Answer(r.status, r.body(), (done[i] - started[i]) * 1000, done[i]) for i, r in enumerate(readers)]
    finally:
        for sock in socks:
            sock.close()
