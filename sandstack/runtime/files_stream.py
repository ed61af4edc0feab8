"""A file read as a stream: its bytes go from the sandbox's `cat` (scripts.READ, as the sandbox's user) through a
pipe to the HTTP response as they come, never spooled whole on the host, with its length announced up front.

READ writes a header before anything else: `F SIZE\\n` before a file's bytes, `D` before a directory's records; an
error is an exit status with nothing written. So the answer is decided (200 with a Content-Length, the listing,
403/404, or 413 for a file past the pool's download_limit: by ls's apparent size, before a byte is read) before
a byte of content is sent. The read holds the sandbox's lease (no pause) until the last byte is sent.
"""

from __future__ import annotations

import fcntl
import os
import threading
from dataclasses import dataclass
from typing import Iterator

from sandstack.runtime import scripts
from sandstack.runtime.errors import too_big
from sandstack.runtime.tarcheck import Bounded, PastBound
from sandstack.runtime.workspace import Workspace, clean_path, listing

CHUNK = 1024 * 1024  # bytes of the answer at most per step: each is a hop through the server's thread pool
PIPE = 1024 * 1024  # the pipe's buffer (Linux's default 64 KiB makes each step small: many hops, slow downloads)


@dataclass
class Opened:
    entries: list[dict[str, object]] | None = None  # a directory
    size: int | None = None  # a file: its length, and its bytes in `chunks`
    chunks: Iterator[bytes] | None = None


def open_read(workspace: Workspace, name: str, path: str) -> Opened:
    rel = clean_path(path)
    lease = workspace.leases.use(name)
    lease.__enter__()
    try:
        root = workspace._root(name)
        limit = workspace.download_limit(name)
        read_fd, write_fd = os.pipe()
        try:
            fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, PIPE)
        except OSError:  # past the system's pipe-max-size: the default buffer works, in smaller steps
            pass
        reader, writer = os.fdopen(read_fd, "rb"), os.fdopen(write_fd, "wb", buffering=0)
        done: dict[str, object] = {}

        def produce() -> None:
            try:
                done["status"] = workspace._run(name, scripts.sh(scripts.READ, rel or "."), root,
                                                stdout=Bounded(writer, limit + scripts.READ_HEADER))
            except BaseException as error:  # handed to the reading side
                done["error"] = error
            finally:
                writer.close()

        thread = threading.Thread(target=produce, name=f"sandstack-read-{name}", daemon=True)
        thread.start()
    except BaseException:
        lease.__exit__(None, None, None)
        raise

    def finish() -> None:
        reader.close()  # a producer still writing gets a broken pipe; its script is ended
        thread.join()
        lease.__exit__(None, None, None)

    def outcome() -> None:
        thread.join()
        if "error" in done:
            raise done["error"]  # type: ignore[misc]
        code, stderr = done["status"]  # type: ignore[misc]
        if code not in (0, scripts.IS_DIRECTORY):
            raise workspace._fail(code, stderr, path, name, "reading")

    try:
        kind = reader.read(1)
        if kind == b"D":
            data = reader.read()
            outcome()
            finish()
            return Opened(entries=listing(data))
        if kind != b"F":
            outcome()  # nothing written: the status says why
            raise RuntimeError(f"reading {path!r}: the sandbox's read script wrote no header")
        size_text = reader.readline(scripts.READ_HEADER).strip()
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
            # Full steps (read waits for CHUNK bytes or the end): fewer hops, and fewer, larger sends.
            while chunk := reader.read(CHUNK):
                yield chunk
            outcome()  # a failure now (the file grew past the bound) cuts the answer short: its length says so
        finally:
            finish()

    return Opened(size=size, chunks=chunks())
