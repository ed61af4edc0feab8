"""A handle on a process started in a sandbox (`Sandbox.start`): its output as it is written, stdin, wait, kill.

    proc = sandbox.start(["make", "test"])
    for event in proc:                      # stdout and stderr, in the order they were written
        print(event.kind, event.text, end="")
    info = proc.wait(timeout=60)            # raises Timeout if it still runs then

Following the output survives a dropped connection: it reconnects from the last position it read (as many times
as the host's retry policy allows in a row). Written once, async (AsyncProcess); `Process` is its sync face
(sandstack.client.blocking).
"""

from __future__ import annotations

import time
from typing import Any, AsyncIterator, Iterator

import httpx

from sandstack.client.blocking import face_name, sync_face
from sandstack.client.errors import Conflict, HostUnavailable, Timeout
from sandstack.client.results import OutputEvent, ProcessInfo
from sandstack.client.sse import aevents

WAIT_CHUNK = 300  # seconds of one wait request; a longer wait is several
# Seconds a stdin write waits, on this side, while the runtime still holds an earlier write the process has not
# read (its 409 carries `pending`): the runtime answers every write at once and holds no request.
STDIN_WAIT = 30


def broke(error: HostUnavailable) -> bool:
    """The output's connection broke while it was read (a reconnect reads on from the last position), rather than
    the host not answering at all (the stream's own retries were spent)."""
    return isinstance(error.__cause__, (httpx.ReadError, httpx.RemoteProtocolError))


def _waits(timeout: float | None) -> Iterator[float]:
    """The server-side waits that make up one of `timeout` seconds (None: without end)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = WAIT_CHUNK if deadline is None else min(WAIT_CHUNK, max(deadline - time.monotonic(), 0))
        yield left
        if deadline is not None and time.monotonic() >= deadline:
            return


def stdin_retries(timeout: float) -> Iterator[float]:
    """Pauses between tries of a stdin write the runtime refused because it still holds an earlier one, until
    `timeout` seconds have passed (then the last refusal is raised)."""
    deadline, delay = time.monotonic() + timeout, 0.01
    while time.monotonic() + delay <= deadline:
        yield delay
        delay = min(delay * 2, 0.5)


def held(error: Conflict) -> bool:
    """The 409 of a stdin write the runtime did not take because it holds bytes not read yet: worth trying again."""
    return "pending" in error.body


class AsyncProcess:
    def __init__(self, sandbox: Any, info: ProcessInfo):  # a sandstack.client.async_client.AsyncSandbox
        self.sandbox, self.info, self.id = sandbox, info, info.id
        self._host = sandbox.host

    def __repr__(self) -> str:
        return f"{face_name(self)}({self.id!r}, {self.info.status!r})"

    async def refresh(self) -> ProcessInfo:
        self.info = ProcessInfo.of(await self._host.process(self.sandbox.name, self.id))
        return self.info

    async def wait(self, timeout: float | None = None) -> ProcessInfo:
        """The process once it ended; Timeout when `timeout` seconds pass first."""
        for chunk in _waits(timeout):
            self.info = ProcessInfo.of(await self._host.wait_process(self.sandbox.name, self.id, chunk))
            if not self.info.running:
                return self.info
        raise Timeout(504, f"process {self.id!r} still runs after {timeout}s", self.info.to_dict(), self._host.name)

    async def kill(self) -> ProcessInfo:
        """SIGKILL to every process it started; answers once it has ended."""
        self.info = ProcessInfo.of(await self._host.kill_process(self.sandbox.name, self.id))
        return self.info

    async def write_stdin(self, data: bytes | str, timeout: float = STDIN_WAIT) -> None:
        """Bytes to its stdin. The runtime takes them at once, holding what the process has not read yet; while it
        holds an earlier write's bytes this waits (up to `timeout` seconds, then Conflict)."""
        await self._stdin(data.encode() if isinstance(data, str) else data, False, timeout)

    async def close_stdin(self, timeout: float = STDIN_WAIT) -> None:
        await self._stdin(b"", True, timeout)

    async def _stdin(self, data: bytes, close: bool, timeout: float) -> None:
        pauses = stdin_retries(timeout)
        while True:
            try:
                self.info = ProcessInfo.of(await self._host.write_stdin(self.sandbox.name, self.id, data,
                                                                        close=close))
                return
            except Conflict as error:
                pause = next(pauses, None) if held(error) else None
                if pause is None:
                    raise
            await self._host.io.sleep(pause)

    async def output(self, after: int = 0, follow: bool = True) -> AsyncIterator[OutputEvent]:
        """Its output from position `after`: 'stdout' and 'stderr' events (and 'truncated' once per stream past
        its limit) as they are written; ends when the process has ended (its info is then up to date)."""
        failures = 0
        while True:
            try:
                async with self._host.process_output(self.sandbox.name, self.id, after, follow) as response:
                    async for event in aevents(self._host.io.lines(response)):
                        failures = 0
                        if event.kind == "exit":
                            self.info = ProcessInfo.of(event.data)
                            return
                        if event.position is not None:
                            after = event.position
                        yield event
                return  # not following: what was kept has been read
            except HostUnavailable as error:
                failures += 1
                if not broke(error) or failures >= self._host.retry.attempts:
                    raise
                await self._host.io.sleep(self._host.retry.delay(failures))

    def __aiter__(self) -> AsyncIterator[OutputEvent]:
        return self.output()


Process = sync_face(AsyncProcess, "Process", __name__)
