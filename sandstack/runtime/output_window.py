"""An exec's output between the thread that reads it and the event loop that sends it (a terminal's WebSocket, an
SSH channel): the reader waits while OUTPUT_WINDOW bytes are unsent, so a slow client costs the runtime no more
than the window, and the process blocks on a full pipe as it would on a slow terminal."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

OUTPUT_WINDOW = 256 * 1024  # bytes read from an exec but not yet sent to the client


class OutputWindow:
    def __init__(self, loop: asyncio.AbstractEventLoop | None, client: str):
        assert loop is not None
        self.loop, self.client = loop, client  # client: who reads it, for the reader's error ("the SSH client")
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.cond, self.pending, self.closed = threading.Condition(), 0, False
        self.active = time.monotonic()  # the last output (a terminal's inactivity close also counts its input)

    def write(self, data: bytes) -> int:
        """From the reader's thread: waits while the window is full; BrokenPipeError once the client is gone."""
        self.active = time.monotonic()
        with self.cond:
            self.cond.wait_for(lambda: self.pending < OUTPUT_WINDOW or self.closed)
            if self.closed:
                raise BrokenPipeError(f"{self.client} is gone")
            self.pending += len(data)
        self.loop.call_soon_threadsafe(self.queue.put_nowait, data)
        return len(data)

    def sent(self, size: int) -> None:
        """`size` bytes of what was queued reached the client: the reader may go on."""
        with self.cond:
            self.pending -= size
            self.cond.notify_all()

    async def pump(self, writer: Any) -> None:
        """What was written, to `writer` (write, and an awaitable drain), until `end`."""
        while True:
            data = await self.queue.get()
            if data is None:
                return
            try:
                writer.write(data)
                await writer.drain()
            finally:
                self.sent(len(data))

    def end(self) -> None:
        """The exec's stream ended: the pump sends what is queued, then returns."""
        self.queue.put_nowait(None)

    def close(self) -> None:
        """The client is gone: a waiting reader stops."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
