"""A file read as a stream: its bytes go from the sandbox's `cat` (scripts.READ, as the sandbox's user) to the HTTP
response as they come, never spooled whole on the host, with its length announced up front.

The response's own iterator pulls the exec's stdout (SandboxBackend.stream: on Docker, the exec's socket read in
1 MiB receives by the thread that sends the answer; no pipe and no thread between them).

READ writes a header before anything else: `F SIZE\\n` before a file's bytes, `D` before a directory's records; an
error is an exit status with nothing written. So the answer is decided (200 with a Content-Length, the listing,
403/404, or 413 for a file past the pool's download_limit: by ls's apparent size, before a byte is read) before
a byte of content is sent. Every byte counts against download_limit (plus the header): past it, or when the
answer ends early (the client gone, the deadline), the script is killed by its marker, as Transfers.run does, and
the answer is cut short (its Content-Length says so). The read holds the sandbox's lease (no pause) and its marker
(a user's timed-out command's kill leaves it alone) until the last byte is sent.
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from sandstack.runtime import scripts
from sandstack.runtime.backend import ExecStream, SandboxGone, SandboxNotRunning
from sandstack.runtime.errors import too_big
from sandstack.runtime.exec_stream import STEP as CHUNK, PipedStream
from sandstack.runtime.execs import SCRIPT_TIMEOUT as TIMEOUT
from sandstack.runtime.files import Files, clean_path, listing
from sandstack.runtime.interfaces import Sandboxes, Transfers
from sandstack.runtime.tarcheck import PastBound


@dataclass
class Opened:
    entries: list[dict[str, object]] | None = None  # a directory
    size: int | None = None  # a file: its length, and its bytes in `chunks`
    chunks: Iterator[bytes] | None = None


class Pulled:
    """The read script's stdout as the runtime's own exec: marked while it runs, each byte counted against `bound`
    (PastBound past it), the header taken apart from what follows; a sandbox that stopped is reported as
    Transfers.run reports it. `close` kills the script unless its output ended."""

    def __init__(self, sandboxes: Sandboxes, transfers: Transfers, name: str, argv: list[str], workdir: str,
                 bound: int):
        self.sandboxes, self.transfers, self.name, self.bound = sandboxes, transfers, name, bound
        self.count, self.pending, self.ended = 0, b"", False
        self.row = sandboxes.get(name)
        self.marker = f"internal-{uuid.uuid4().hex}"
        execs = transfers.execs
        execs.mark(self.marker)
        try:
            with self._died():
                env = {scripts.MARKER_ENV: self.marker, "PATH": scripts.SYSTEM_PATH}
                backend = sandboxes.backend
                stream = backend.stream(name, argv, workdir=workdir, env=env, timeout=TIMEOUT)
                self.stream: ExecStream = stream or PipedStream(backend, name, argv, workdir=workdir, env=env,
                                                                timeout=TIMEOUT)
        except BaseException:
            execs.unmark(self.marker)
            raise

    @contextmanager
    def _died(self) -> Iterator[None]:
        """A sandbox that stopped under the read, reported as the runtime reports it (Transfers.run)."""
        try:
            yield
        except (SandboxNotRunning, SandboxGone) as error:
            raise self.sandboxes.died(self.row, error) from error

    def next(self) -> bytes:
        """The next bytes (b'' at the end)."""
        if self.pending:
            chunk, self.pending = self.pending, b""
            return chunk
        with self._died():
            chunk = self.stream.read()
        if not chunk:
            self.ended = True
            return chunk
        self.count += len(chunk)
        if self.count > self.bound:
            raise PastBound(self.bound)
        return chunk

    def take(self, size: int, line: bool = False) -> bytes:
        """`size` bytes (fewer only at the end); with `line`, up to and with the first newline within them."""
        data = b""
        while len(data) < size and not (line and b"\n" in data) and (chunk := self.next()):
            data += chunk
        end = data.find(b"\n", 0, size) + 1 if line else 0
        cut = end or min(size, len(data))
        data, self.pending = data[:cut], data[cut:]
        return data

    def rest(self) -> Iterator[bytes]:
        while chunk := self.next():
            yield chunk

    def status(self) -> tuple[int | None, str]:
        """After the end: (exit code, stderr); code None when the deadline passed."""
        with self._died():
            code = self.stream.wait()
        return code, self.stream.stderr.data.decode(errors="replace").strip()

    def close(self) -> None:
        try:
            if not self.ended:
                self.transfers.kill(self.name, self.marker)
        finally:
            self.stream.close()
            self.transfers.execs.unmark(self.marker)


def open_read(files: Files, name: str, path: str) -> Opened:
    rel = clean_path(path)
    lease = files.leases.use(name)
    lease.__enter__()
    try:
        limit = files.download_limit(name)
        pulled = Pulled(files.sandboxes, files.transfers, name, scripts.sh(scripts.READ, rel or "."), files.root(name),
                        limit + scripts.READ_HEADER)
    except BaseException:
        lease.__exit__(None, None, None)
        raise

    finished = []

    def finish() -> None:
        if finished:
            return
        finished.append(True)
        try:
            pulled.close()
        finally:
            lease.__exit__(None, None, None)

    def outcome() -> None:
        code, stderr = pulled.status()
        if code not in (0, scripts.IS_DIRECTORY):
            raise files.transfers.fail(code, stderr, path, name, "reading")

    try:
        kind = pulled.take(1)
        if kind == b"D":
            data = b"".join(pulled.rest())
            outcome()
            finish()
            return Opened(entries=listing(data))
        if kind != b"F":
            outcome()  # nothing written: the status says why
            raise RuntimeError(f"reading {path!r}: the sandbox's read script wrote no header")
        size_text = pulled.take(scripts.READ_HEADER, line=True).strip()
        size = int(size_text) if size_text.isdigit() else None
        if size is not None and size > limit:
            raise too_big(f"reading {path!r}", limit, path=path)
    except PastBound as error:
        finish()
        raise too_big(f"reading {path!r}", limit, path=path) from error
    except BaseException:
        finish()
        raise

    def chunks() -> Iterator[bytes]:
        try:
            yield from pulled.rest()
            outcome()  # a failure now (the file grew past the bound) cuts the answer short: its length says so
        finally:
            finish()

    return Opened(size=size, chunks=chunks())
