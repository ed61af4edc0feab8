"""A terminal in a sandbox (`Sandbox.terminal()`), over the runtime's WebSocket (httpx-ws, on the host's own httpx
client): keystrokes in, the terminal's bytes out, resize; the shell and all it started end when it is closed.
Written once (AsyncTerminal); `Terminal` is its sync face.

    with sandbox.terminal(rows=24, cols=80) as term:
        term.send("echo hi\\n")
        print(term.read_until(b"hi", timeout=5))

    with sandbox.terminal(mode="command") as term:  # each command's output and exit status apart
        result = term.run("ls /work")  # {"output": ..., "exit_code": 0, ...}
"""

from __future__ import annotations

import json
import queue
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

from httpx_ws import WebSocketDisconnect

from sandstack.client.blocking import sync_face
from sandstack.client.errors import SandstackError, Timeout, error_for
from sandstack.client.transport import settle


def _refused(error: WebSocketDisconnect, host: str) -> SandstackError:
    """A close code of 4000 + an HTTP status is the runtime's refusal, as the same HTTP request's answer."""
    if 4000 <= (error.code or 0) < 5000:
        return error_for(error.code - 4000, error.reason or "refused", {}, host)
    return SandstackError(502, f"the terminal closed ({error.code}: {error.reason or 'no reason'})", {}, host)


def _params(rows: int, cols: int, command: list[str] | None, mode: str = "raw") -> dict[str, Any]:
    return {"rows": rows, "cols": cols, **({"command": command} if command else {}),
            **({"mode": mode} if mode != "raw" else {})}


class _Screen:
    """What the terminal wrote, its exit code once it ended, and what the runtime said of control messages it did not
    take (`errors`: a resize out of bounds)."""

    def __init__(self) -> None:
        self.output, self.exit_code, self.closed = bytearray(), None, False
        self.errors: list[str] = []
        self.results: dict[int, dict] = {}  # command mode: each command's result by its id
        self.commands = 0  # command mode: the runtime numbers commands 1, 2... as they are sent

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
            elif message.get("type") == "result":
                self.results[int(message["id"])] = message
        return b""

    def run_message(self, command: str, cancel: bool) -> tuple[int, str]:
        self.commands += 1
        return self.commands, json.dumps({"type": "run", "command": command, "cancel": cancel})

    def waited(self, number: int, host: str) -> dict | None:
        """The result of command `number` once it came; raises a refusal the runtime sent instead, or Timeout."""
        if self.errors and self.errors[-1].startswith("run:"):
            error = self.errors.pop()
            self.commands -= 1
            raise error_for(422, error, {}, host)
        return self.results.get(number)


class AsyncTerminal:
    """Written once (async); `Terminal` is its sync face (sandstack.client.blocking). `_ws` is httpx-ws's session,
    sync or async as the host's client is: each of its calls is settled (awaited when it is awaitable)."""

    def __init__(self, ws: Any, host: str):
        self._ws, self._host, self.screen = ws, host, _Screen()

    @property
    def exit_code(self) -> int | None:
        return self.screen.exit_code

    async def send(self, data: bytes | str) -> None:
        await settle(self._ws.send_bytes(data.encode() if isinstance(data, str) else data))

    async def resize(self, rows: int, cols: int) -> None:
        await settle(self._ws.send_text(json.dumps({"type": "resize", "rows": rows, "cols": cols})))

    async def recv(self, timeout: float | None = None) -> bytes:
        """The next output (b"" for a control message); raises EOFError once the terminal has closed."""
        if self.screen.closed:
            raise EOFError("the terminal has closed")
        try:
            return self.screen.take(await settle(self._ws.receive(timeout=timeout)))
        except WebSocketDisconnect as error:
            self.screen.closed = True
            if self.screen.exit_code is None and error.code not in (1000, None):
                raise _refused(error, self._host) from error
            raise EOFError("the terminal has closed") from error

    async def submit(self, command: str, *, cancel: bool = False) -> int:
        """Command mode: sends `command` without waiting; its number, whose result `wait(number)` returns."""
        number, message = self.screen.run_message(command, cancel)
        await settle(self._ws.send_text(message))
        return number

    async def run(self, command: str, *, cancel: bool = False, timeout: float = 60) -> dict:
        """Command mode: runs `command` in the terminal's shell and returns its result (`output`, `exit_code`,
        `truncated`, `cancelled`); `cancel`: Ctrl-C to the command still running first (its result: exit 130)."""
        return await self.wait(await self.submit(command, cancel=cancel), timeout)

    async def wait(self, number: int, timeout: float = 60) -> dict:
        """Command mode: the result of command `number` (a refusal of it raised as the runtime's error)."""
        return await self._receive_until(lambda: self.screen.waited(number, self._host), timeout,
                                         f"command {number} did not end")

    async def read_until(self, wanted: bytes | str, timeout: float = 10) -> bytes:
        """Output up to and including `wanted` (all output since the terminal opened is kept in `screen`)."""
        wanted = wanted.encode() if isinstance(wanted, str) else wanted
        start = len(self.screen.output)
        await self._receive_until(lambda: wanted in self.screen.output[start:], timeout, f"{wanted!r} did not appear")
        end = self.screen.output.index(wanted, start) + len(wanted)
        return bytes(self.screen.output[start:end])

    async def _receive_until(self, done: Callable[[], Any], timeout: float, what: str) -> Any:
        """Receives until `done()` answers (anything true), or raises Timeout naming `what` after `timeout` s."""
        deadline = time.monotonic() + timeout
        while not (value := done()):
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout(504, f"{what} within {timeout}s", {}, self._host)
            try:
                await self.recv(timeout=left)
            except (TimeoutError, queue.Empty):  # the async session's and the sync session's "nothing came"
                continue
        return value


@asynccontextmanager
async def open_terminal(host: Any, sandbox: str, rows: int, cols: int, command: list[str] | None,
                        mode: str = "raw") -> AsyncIterator[AsyncTerminal]:
    async with host.io.websocket(f"/v1/sandboxes/{sandbox}/terminal", _params(rows, cols, command, mode)) as ws:
        yield AsyncTerminal(ws, host.name)


Terminal = sync_face(AsyncTerminal, "Terminal", __name__)
