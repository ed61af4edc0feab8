"""A terminal in a sandbox (`Sandbox.terminal()`), over the runtime's WebSocket (httpx-ws, on the host's own httpx
client): keystrokes in, the terminal's bytes out, resize; the shell and all it started end when it is closed.

    with sandbox.terminal(rows=24, cols=80) as term:
        term.send("echo hi\\n")
        print(term.read_until(b"hi", timeout=5))
"""

from __future__ import annotations

import json
import time
from contextlib import asynccontextmanager, contextmanager
from typing import Any, AsyncIterator, Iterator

from httpx_ws import WebSocketDisconnect, aconnect_ws, connect_ws

from sandstack.client.errors import SandstackError, Timeout, error_for


def _refused(error: WebSocketDisconnect, host: str) -> SandstackError:
    """A close code of 4000 + an HTTP status is the runtime's refusal, as the same HTTP request's answer."""
    if 4000 <= (error.code or 0) < 5000:
        return error_for(error.code - 4000, error.reason or "refused", {}, host)
    return SandstackError(502, f"the terminal closed ({error.code}: {error.reason or 'no reason'})", {}, host)


def _params(rows: int, cols: int, command: list[str] | None) -> dict[str, Any]:
    return {"rows": rows, "cols": cols, **({"command": command} if command else {})}


class _Screen:
    """What the terminal wrote, its exit code once it ended, and what the runtime said of control messages it did not
    take (`errors`: a resize out of bounds)."""

    def __init__(self) -> None:
        self.output, self.exit_code, self.closed = bytearray(), None, False
        self.errors: list[str] = []

    def take(self, event: Any) -> bytes:
        data = getattr(event, "data", None)  # httpx-ws gives wsproto's messages: bytes or text
        if isinstance(data, (bytes, bytearray)):
            self.output += data
            return bytes(data)
        if isinstance(data, str):
            message = json.loads(data)
            if message.get("type") == "exit":
                self.exit_code = message.get("exit_code")
            elif message.get("type") == "error":
                self.errors.append(str(message.get("error")))
        return b""


class Terminal:
    def __init__(self, ws: Any, host: str):
        self._ws, self._host, self.screen = ws, host, _Screen()

    @property
    def exit_code(self) -> int | None:
        return self.screen.exit_code

    def send(self, data: bytes | str) -> None:
        self._ws.send_bytes(data.encode() if isinstance(data, str) else data)

    def resize(self, rows: int, cols: int) -> None:
        self._ws.send_text(json.dumps({"type": "resize", "rows": rows, "cols": cols}))

    def recv(self, timeout: float | None = None) -> bytes:
        """The next output (b"" for a control message); raises EOFError once the terminal has closed."""
        if self.screen.closed:
            raise EOFError("the terminal has closed")
        try:
            return self.screen.take(self._ws.receive(timeout=timeout))
        except WebSocketDisconnect as error:
            self.screen.closed = True
            if self.screen.exit_code is None and error.code not in (1000, None):
                raise _refused(error, self._host) from error
            raise EOFError("the terminal has closed") from error

    def read_until(self, wanted: bytes | str, timeout: float = 10) -> bytes:
        """Output up to and including `wanted` (all output since the terminal opened is kept in `screen`)."""
        wanted = wanted.encode() if isinstance(wanted, str) else wanted
        start, deadline = len(self.screen.output), time.monotonic() + timeout
        while wanted not in self.screen.output[start:]:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout(504, f"{wanted!r} did not appear within {timeout}s", {}, self._host)
            try:
                self.recv(timeout=left)
            except TimeoutError:
                continue
        end = self.screen.output.index(wanted, start) + len(wanted)
        return bytes(self.screen.output[start:end])


@contextmanager
def open_terminal(host: Any, sandbox: str, rows: int, cols: int, command: list[str] | None) -> Iterator[Terminal]:
    with connect_ws(f"/v1/sandboxes/{sandbox}/terminal", host.http, params=_params(rows, cols, command)) as ws:
        terminal = Terminal(ws, host.name)
        yield terminal


class AsyncTerminal:
    def __init__(self, ws: Any, host: str):
        self._ws, self._host, self.screen = ws, host, _Screen()

    @property
    def exit_code(self) -> int | None:
        return self.screen.exit_code

    async def send(self, data: bytes | str) -> None:
        await self._ws.send_bytes(data.encode() if isinstance(data, str) else data)

    async def resize(self, rows: int, cols: int) -> None:
        await self._ws.send_text(json.dumps({"type": "resize", "rows": rows, "cols": cols}))

    async def recv(self, timeout: float | None = None) -> bytes:
        if self.screen.closed:
            raise EOFError("the terminal has closed")
        try:
            return self.screen.take(await self._ws.receive(timeout=timeout))
        except WebSocketDisconnect as error:
            self.screen.closed = True
            if self.screen.exit_code is None and error.code not in (1000, None):
                raise _refused(error, self._host) from error
            raise EOFError("the terminal has closed") from error

    async def read_until(self, wanted: bytes | str, timeout: float = 10) -> bytes:
        wanted = wanted.encode() if isinstance(wanted, str) else wanted
        start, deadline = len(self.screen.output), time.monotonic() + timeout
        while wanted not in self.screen.output[start:]:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout(504, f"{wanted!r} did not appear within {timeout}s", {}, self._host)
            try:
                await self.recv(timeout=left)
            except TimeoutError:
                continue
        end = self.screen.output.index(wanted, start) + len(wanted)
        return bytes(self.screen.output[start:end])


@asynccontextmanager
async def aopen_terminal(host: Any, sandbox: str, rows: int, cols: int,
                         command: list[str] | None) -> AsyncIterator[AsyncTerminal]:
    async with aconnect_ws(f"/v1/sandboxes/{sandbox}/terminal", host.http,
                           params=_params(rows, cols, command)) as ws:
        yield AsyncTerminal(ws, host.name)
