"""A watch of a workspace directory (`Sandbox.watch()`): change events as files are created, modified, deleted.

    with sandbox.watch("out") as changes:
        for change in changes:           # WatchEvent(kind, path), path relative to the workspace root
            if change.path == "out/result.json":
                break
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator

from sandstack.client.blocking import sync_face
from sandstack.client.errors import Conflict

BEHIND = ("the watch's events moved on past what was read: more than the runtime keeps of one process's output (the "
          "host's output limit) came between two reads; changes were missed, start a new watch")


@dataclass(frozen=True)
class WatchEvent:
    kind: str  # created, modified, deleted
    path: str


class _Lines:
    def __init__(self) -> None:
        self.partial = ""

    def feed(self, text: str) -> list[WatchEvent]:
        self.partial += text
        *lines, self.partial = self.partial.split("\n")
        return [WatchEvent(*line.split("\t", 1)) for line in lines if "\t" in line]


class AsyncWatch:
    """Iterates change events; `stop()` (or the end of its `with`) ends the watch in the sandbox. `Sandbox.watch`
    makes it once the watch has taken the directory's first state (`ready`): every change after that is reported.
    `Watch` is its sync face (sandstack.client.blocking)."""

    def __init__(self, process):
        self.process = process
        self._events = self._read()

    async def ready(self) -> AsyncWatch:
        async for change in self._events:
            if change.kind == "ready":
                break
        return self

    async def _read(self) -> AsyncIterator[WatchEvent]:
        lines = _Lines()
        async for event in self.process:
            if event.kind == "stdout":
                for change in lines.feed(event.text):
                    yield change
            elif event.kind == "skipped":
                raise Conflict(409, BEHIND, {"process": self.process.id, **event.data})

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self._events

    async def stop(self) -> None:
        if self.process.info.running:
            await self.process.kill()

    async def __aenter__(self) -> AsyncWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


Watch = sync_face(AsyncWatch, "Watch", __name__)
