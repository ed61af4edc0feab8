"""Files moved between this machine and a sandbox as streams (`Sandbox.upload`, `Sandbox.download` and their async
twins): an upload read from a local file a piece at a time, a download written to one as it comes. Neither holds
a file whole in memory, so a file of any size moves in a few MiB of the client's memory (the runtime streams its
side too: sandstack.runtime.files_upload, files_stream).

An upload's body declares its length when the source is a regular file (no chunked encoding) and is read again
from where it started when a retried request sends it again; a source that cannot be read again (a pipe) is sent
once: a connection that breaks after its first byte went is reported, not retried with what is left. The runtime
keeps an upload only when all of it came (the path keeps what it held before otherwise).

A download to a path goes to a hidden file beside it, which replaces the path only when every byte the runtime
announced has come: a download that breaks leaves the path as it was and no partial file.
"""

from __future__ import annotations

import asyncio
import os
import stat
import uuid
from pathlib import Path
from typing import IO, AsyncIterator, Callable, Iterator

from sandstack.client.errors import HostUnavailable
from sandstack.client.pieces import PIECE
from sandstack.files import open_regular

Source = str | os.PathLike | IO[bytes]
Destination = str | os.PathLike | IO[bytes]
# Called with the bytes moved so far and the whole size when known (None: a pipe), after each piece; an upload
# retried from its start reports from 0 again. `sandstack sandbox put/get` draw their progress line with it.
Progress = Callable[[int, "int | None"], None]


class _Body:
    """A local file as an upload's body, from where it stood when given: PIECE-sized reads, `length` bytes when
    known (a regular file, or a seekable object: the Content-Length), else to its end (chunked)."""

    def __init__(self, file: IO[bytes], label: str, host: str, progress: Progress | None = None):
        self.file, self.label, self.host, self.progress = file, label, host, progress
        self.start = _position(file)
        self.length = _left(file, self.start)
        self.begun = False  # a piece was read: sending it again needs the source from its start
        self.sent = 0

    def _sent(self, piece: bytes) -> bytes:
        self.sent += len(piece)
        if self.progress is not None:
            self.progress(self.sent, self.length)
        return piece

    def headers(self) -> dict[str, str]:
        return {} if self.length is None else {"Content-Length": str(self.length)}

    def _rewind(self) -> None:
        if self.begun:
            if self.start is None:
                raise HostUnavailable(503, f"the upload from {self.label} broke after it began and its source "
                                           "cannot be read again from the start (a pipe); nothing was kept: upload it "
                                           "again", {"source": self.label}, self.host)
            self.file.seek(self.start)
        self.begun, self.sent = True, 0

    def _pieces(self) -> Iterator[int]:
        """The size of each read: PIECE, the last one to `length` when it is known."""
        if self.length is None:
            while True:
                yield PIECE
        left = self.length
        while left > 0:
            yield min(PIECE, left)
            left -= PIECE


class FileBody(_Body):
    """The sync client's (httpx sends an iterable; iterated again for a retried request)."""

    def __iter__(self) -> Iterator[bytes]:
        self._rewind()
        for size in self._pieces():
            piece = self.file.read(size)
            if not piece:
                return  # shorter than it was (a declared length the server then finds short: refused there)
            yield self._sent(piece)


class AsyncFileBody(_Body):
    """The async client's: the file read in a thread, so that the event loop never waits on the disk."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        await asyncio.to_thread(self._rewind)
        for size in self._pieces():
            piece = await asyncio.to_thread(self.file.read, size)
            if not piece:
                return
            yield self._sent(piece)


def _position(file: IO[bytes]) -> int | None:
    try:
        return file.tell() if file.seekable() else None
    except (OSError, ValueError):
        return None


def _left(file: IO[bytes], start: int | None) -> int | None:
    """Bytes from `start` to the end of a regular file or seekable object; None for a pipe, a socket, a tty."""
    if start is None:
        return None
    try:
        info = os.fstat(file.fileno())
        if stat.S_ISREG(info.st_mode):
            return max(info.st_size - start, 0)
        return None
    except (AttributeError, OSError, ValueError):  # no descriptor (BytesIO): its end, found by seeking
        end = file.seek(0, os.SEEK_END)
        file.seek(start)
        return max(end - start, 0)


def open_source(source: Source) -> tuple[IO[bytes], str, bool]:
    """(file, its label for messages, whether it is ours to close)."""
    if isinstance(source, (str, os.PathLike)):
        # A regular file only (sandstack.files): a FIFO's open would wait, a device never ends. Its size is the
        # runtime's to bound (the pool's upload_limit, 413): it is streamed, never held.
        return open_regular(source, what="a file to upload"), repr(os.fspath(source)), True
    name = getattr(source, "name", None)  # a descriptor's number for os.fdopen's files: not a name
    return source, repr(name) if isinstance(name, str) else "a file object", False


class Sink:
    """Where a download's bytes go: a hidden file beside `dest` that replaces it at the end (a path), or the
    caller's file object as they come."""

    def __init__(self, dest: Destination, progress: Progress | None = None):
        self.progress, self.total = progress, None
        if isinstance(dest, (str, os.PathLike)):
            self.path: Path | None = Path(dest)
            self.part = self.path.with_name(f".{self.path.name}.sandstack-{uuid.uuid4().hex[:12]}.part")
            self.file: IO[bytes] = open(self.part, "xb")
        else:
            self.path, self.file = None, dest
        self.count = 0

    def announced(self, length: str | None) -> None:
        self.total = int(length) if length is not None and length.isdigit() else None

    def write(self, data: bytes) -> None:
        self.file.write(data)
        self.count += len(data)

    def report(self) -> None:
        """Called by the reading side after each write (the async client's writes run in a thread: it is not)."""
        if self.progress is not None:
            self.progress(self.count, self.total)

    def done(self, path: str, host: str) -> int:
        if self.total is not None and self.total != self.count:
            raise HostUnavailable(503, f"the download of {path!r} ended after {self.count} of {self.total} bytes; "
                                       "nothing was written", {"path": path}, host)
        if self.path is not None:
            self.file.close()
            os.replace(self.part, self.path)
        return self.count

    def abort(self) -> None:
        if self.path is not None:
            self.file.close()
            self.part.unlink(missing_ok=True)

