"""What a process wrote, kept as it was written, for followers that read it live or later.

Per stream (stdout, stderr), the first `limit` bytes are kept and the rest only counted: a command that prints
for an hour takes at most `limit` bytes of the runtime's memory per stream, whoever reads it and however slowly.
A `rolling` log (a watch's, which may run for the whole session) keeps the last `limit` characters instead: its
followers read on for as long as it runs, and one that falls further behind than that skips what was let go
(`start`, the position of the oldest character kept).
Bytes are decoded as UTF-8 as they come (a character split between two writes is joined; a bad byte becomes
U+FFFD). A position in the log is a count of characters across both streams in the order they came: a follower
that reconnects gives the last position it saw and reads on from there.

Readers wait for more in a thread (`wait`) or in the event loop (`listen`: the writer wakes the loop with
call_soon_threadsafe), so a follower holds no thread of the server's pool while the process is quiet.
"""

from __future__ import annotations

import bisect
import codecs
import threading
from typing import Callable

STREAMS = ("stdout", "stderr")
MAX_PIECES = 4096  # pieces kept before runs of one stream are joined: many tiny writes cost no more than one
JOINED = 64 * 1024  # characters a join makes one piece of at most: a rolling log lets go of whole pieces


class OutputLog:
    def __init__(self, limit: int, rolling: bool = False):
        self.limit, self.rolling = limit, rolling
        self.start = 0  # the position of the oldest character kept (past 0 only in a rolling log)
        self.kept = {stream: 0 for stream in STREAMS}  # bytes
        self.dropped = {stream: 0 for stream in STREAMS}
        self._decoders = {stream: codecs.getincrementaldecoder("utf-8")("replace") for stream in STREAMS}
        self._starts: list[int] = []  # each piece's position
        self._pieces: list[tuple[str, str]] = []  # (stream, text)
        self.end = 0  # the position after the last character
        self.closed = False
        self._cond = threading.Condition()
        self._listeners: set[Callable[[], None]] = set()

    def sink(self, stream: str) -> "_Sink":
        return _Sink(self, stream)

    def write(self, stream: str, data: bytes) -> None:
        with self._cond:
            room = len(data) if self.rolling else max(self.limit - self.kept[stream], 0)
            kept = data[:room]
            self.kept[stream] += len(kept)
            self.dropped[stream] += len(data) - len(kept)
            if kept:
                self._add(stream, self._decoders[stream].decode(kept))
            if self.rolling:
                self._let_go()
        self._wake()

    def _let_go(self) -> None:
        """Drops the oldest characters of a rolling log past its `limit`: whole pieces, then the front of one."""
        while self._pieces and self.end - self._starts[0] > self.limit:
            stream, text = self._pieces[0]
            excess = self.end - self._starts[0] - self.limit
            if excess >= len(text):
                del self._starts[0], self._pieces[0]
            else:
                self._starts[0] += excess
                self._pieces[0] = (stream, text[excess:])
        self.start = self._starts[0] if self._pieces else self.end

    def _add(self, stream: str, text: str) -> None:
        if not text:
            return
        if len(self._pieces) >= MAX_PIECES:
            self._compact()
        self._starts.append(self.end)
        self._pieces.append((stream, text))
        self.end += len(text)

    def _compact(self) -> None:
        """Joins each run of one stream into one piece; positions do not change, so no follower notices."""
        starts: list[int] = []
        pieces: list[tuple[str, list[str]]] = []
        size = 0
        for start, (stream, text) in zip(self._starts, self._pieces):
            if pieces and pieces[-1][0] == stream and size + len(text) <= JOINED:
                pieces[-1][1].append(text)
                size += len(text)
            else:
                size = len(text)
                starts.append(start)
                pieces.append((stream, [text]))
        self._starts, self._pieces = starts, [(stream, "".join(texts)) for stream, texts in pieces]

    def close(self) -> None:
        """The process ended: what the decoders held back (a cut character) is flushed, and followers stop."""
        with self._cond:
            if self.closed:
                return
            for stream in STREAMS:
                self._add(stream, self._decoders[stream].decode(b"", final=True))
            self.closed = True
        self._wake()

    def read(self, after: int = 0) -> list[tuple[int, str, str]]:
        """(position after it, stream, text) of everything past position `after`."""
        with self._cond:
            index = max(bisect.bisect_right(self._starts, after) - 1, 0)
            found = []
            for start, (stream, text) in zip(self._starts[index:], self._pieces[index:]):
                if start + len(text) <= after:
                    continue
                found.append((start + len(text), stream, text[max(after - start, 0):]))
            return found

    def text(self, stream: str) -> str:
        with self._cond:
            return "".join(text for kind, text in self._pieces if kind == stream)

    def wait(self, after: int, timeout: float | None) -> bool:
        """Blocks until there is something past `after` or the log is closed; False when the time is up."""
        with self._cond:
            return self._cond.wait_for(lambda: self.end > after or self.closed, timeout)

    def listen(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Calls `wake` (from the writer's thread) whenever the log grows or closes; returns the unsubscribe."""
        with self._cond:
            self._listeners.add(wake)
        return lambda: self._listeners.discard(wake)

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()
            listeners = list(self._listeners)
        for wake in listeners:
            try:
                wake()
            except RuntimeError:  # a follower's event loop already closed
                self._listeners.discard(wake)


class _Sink:
    def __init__(self, log: OutputLog, stream: str):
        self.log, self.stream = log, stream

    def write(self, data: bytes) -> int:
        self.log.write(self.stream, data)
        return len(data)
