"""Server-Sent Events as the runtime sends them (`id:`, `event:`, one `data:` line of JSON, a blank line; `:`
comments keep a quiet stream open): the few lines of the format the client needs."""

from __future__ import annotations

import json
from typing import AsyncIterator

from sandstack.client.results import OutputEvent


class _Parser:
    def __init__(self) -> None:
        self.kind, self.id, self.data = "message", None, []

    def feed(self, line: str) -> OutputEvent | None:
        if not line:
            if not self.data:
                return None
            data = json.loads("\n".join(self.data))
            event = OutputEvent(self.kind, data.get("text", ""), self.id, data)
            self.kind, self.id, self.data = "message", None, []
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self.kind = value
        elif name == "data":
            self.data.append(value)
        elif name == "id" and value.isdigit():
            self.id = int(value)
        return None


async def aevents(lines: AsyncIterator[str]) -> AsyncIterator[OutputEvent]:
    parser = _Parser()
    async for line in lines:
        event = parser.feed(line)
        if event is not None:
            yield event
