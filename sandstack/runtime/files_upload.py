"""A file written as a stream: the request's body goes to the sandbox's WRITE script (as the sandbox's user) as it
arrives, never spooled on the host, counted against the pool's upload_limit while it flows.

The body is handed from the event loop to the exec's thread through a Feed holding a few MiB at most (the
request is read no faster than the sandbox takes it). A complete body is followed by WRITE's trailer (its nonce and
byte count); a body cut short (past the limit, the client gone) ends without it, so the script removes what it had
written and the path keeps what it held before (scripts.WRITE: a hidden file beside it replaces it only when
complete).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import deque

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request

from sandstack.runtime import scripts
from sandstack.runtime.errors import ApiError
from sandstack.runtime.files import Files, Incomplete

HELD = 4 * 1024 * 1024  # bytes of a body held between the request and the exec at most
# bytes the exec's side waits for before it takes what came (unless the body ended): the server reads a body in
# pieces of 64-256 KiB, and waking the exec's thread for each was a GIL hand-over and a small send per piece.
GATHER = 1024 * 1024


class Feed:
    """A body as the exec's stdin: `put` (the request's side) blocks while HELD bytes wait; `read` (the exec's
    side) blocks until a chunk comes or the body ends; `finish` ends it with the trailer, `cut` without it."""

    def __init__(self, nonce: str):
        self.nonce, self.count = nonce, 0
        self._chunks: deque[bytes] = deque()
        self._held = 0
        self._ended = self._gone = False  # gone: the exec stopped reading (it ended): puts are dropped
        self._cond = threading.Condition()

    def offer(self, chunk: bytes) -> bool:
        """Takes the chunk without waiting, if there is room (False: `put` it from a thread)."""
        with self._cond:
            if self._held >= HELD and not self._gone:
                return False
            self._add(chunk)
            return True

    def put(self, chunk: bytes) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._held < HELD or self._gone)
            self._add(chunk)

    def _add(self, chunk: bytes) -> None:
        self.count += len(chunk)
        if not self._gone:
            self._chunks.append(chunk)
            self._held += len(chunk)
            if self._held >= GATHER:  # else the reader would wake up only to wait again
                self._cond.notify_all()

    def finish(self) -> None:
        with self._cond:
            self._chunks.append(scripts.trailer(self.nonce, self.count))
            self._end()

    def cut(self) -> None:
        with self._cond:
            self._end()

    def _end(self) -> None:
        self._ended = True
        self._cond.notify_all()

    def gone(self) -> None:
        with self._cond:
            self._gone = True
            self._chunks.clear()
            self._cond.notify_all()

    def read(self, size: int = -1) -> bytes:
        gather = GATHER if size <= 0 else min(size, GATHER)
        with self._cond:
            self._cond.wait_for(lambda: self._held >= gather or self._ended)
            if not self._chunks:
                return b""
            # What waits, joined up to `size`: one large send instead of one per chunk the request came in.
            parts, length = [], 0
            while self._chunks and (size <= 0 or length < size):
                chunk = self._chunks.popleft()
                if 0 < size < length + len(chunk):
                    chunk, rest = chunk[:size - length], chunk[size - length:]
                    self._chunks.appendleft(rest)
                parts.append(chunk)
                length += len(chunk)
            self._held -= length
            self._cond.notify_all()
            return b"".join(parts)


async def upload(request: Request, files: Files, sandbox: str, path: str) -> None:
    """Streams the request's body into the file at `path`; 413 past the pool's upload_limit (nothing written)."""
    limit = files.upload_limit(sandbox)
    too_big = ApiError(413, f"upload to {path!r} exceeds the limit of {limit} bytes", path=path, limit=limit)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_big
    feed = Feed(uuid.uuid4().hex)

    def write() -> None:
        try:
            files.write(sandbox, path, feed, nonce=feed.nonce)
        finally:
            feed.gone()  # the script ended (or never started): the request's side stops waiting on it

    task = asyncio.ensure_future(run_in_threadpool(write))
    # Its outcome is read below, except when the request itself is cancelled: then it is let go quietly.
    task.add_done_callback(lambda done: done.cancelled() or done.exception())
    failure: BaseException | None = None
    try:
        async for chunk in request.stream():
            if not chunk:
                continue  # an empty read would be the exec's EOF
            if task.done():
                break  # the script ended early (a refused path): its status says why
            if feed.count + len(chunk) > limit:
                failure = too_big
                break
            if not feed.offer(chunk):
                await run_in_threadpool(feed.put, chunk)
    except ClientDisconnect as error:
        failure = error
    except BaseException:
        feed.cut()  # the script removes what it wrote and ends
        raise
    if failure is None:
        feed.finish()
    else:
        feed.cut()
    try:
        await task
    except Incomplete:
        if failure is None:
            raise
    if failure is not None:
        raise failure
