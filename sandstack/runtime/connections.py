"""Bounds on the runtime's connections, which uvicorn does not set: a request head must come within HEAD_SECONDS,
and one source address holds at most PER_SOURCE connections.

uvicorn starts no timer on a new connection nor while a request head arrives (its keep-alive timer runs only
between requests, and any byte cancels it), so a client that opens connections and sends a head slowly holds each
one for ever: 19,995 of them filled the runtime's 20,000 descriptors and every platform call failed for ~43 s
(issue 34, item 9). Here each connection is looked at every HEAD_SECONDS: one with a request running is left alone
(a long exec stream, an upload), one that began no request since the last look is closed (a stalled head, or an
idle keep-alive connection, which uvicorn would have closed after 5 s anyway), one handed to a WebSocket (a
terminal) is no longer this protocol's. A source past PER_SOURCE open connections has each new one closed at once:
one machine cannot take the descriptors every other caller needs. On `exposure: host` every local process shares
127.0.0.1 with the platform, so there the bound protects from nothing local (docs/design/runtime.md, "Exposure").

The protocol class is uvicorn's httptools one where httptools is installed (the runtime's image has Debian's
python3-httptools: a warm claim took 1.27 ms of the runtime's CPU with it, 1.6 ms with h11, pure Python;
docs/design/runtime.md, "Claims under a burst"), else its h11 one; the bounds read only what both classes, in
uvicorn 0.17 (Debian's, in the runtime's container) and the current release, keep: `cycle`, its
`response_complete`, `client`, `loop`, `transport`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

HEAD_SECONDS = 10.0
_RUNNING = object()
PER_SOURCE = 512


def parser_protocol(parser: str = "auto") -> type[Any]:
    """uvicorn's HTTP protocol class for `parser`: 'httptools', 'h11', or 'auto' (httptools when it imports, as
    uvicorn's own 'auto' chooses)."""
    if parser == "auto":
        try:
            import httptools  # noqa: F401
        except ImportError:
            parser = "h11"
        else:
            parser = "httptools"
    if parser == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        return HttpToolsProtocol
    if parser == "h11":
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol
    raise ValueError(f"parser {parser!r}: expected 'auto', 'httptools' or 'h11'")


def bounded_protocol(head_seconds: float = HEAD_SECONDS, per_source: int = PER_SOURCE,
                     parser: str = "auto") -> type[Any]:
    """uvicorn's protocol class for `parser` (parser_protocol) with its own count of open connections per source (one
    per server)."""
    open_from: Counter[str] = Counter()

    class Bounded(parser_protocol(parser)):  # type: ignore[misc]
        _source: str | None = None
        _seen: object = None
        _look: asyncio.TimerHandle | None = None

        def connection_made(self, transport):  # type: ignore[override]
            super().connection_made(transport)
            source = self.client[0] if self.client else "local"
            if open_from[source] >= per_source:
                transport.abort()
                return
            self._source = source
            open_from[source] += 1
            self._look = self.loop.call_later(head_seconds, self._look_again)

        def connection_lost(self, exc):  # type: ignore[override]
            if self._source is not None:
                open_from[self._source] -= 1
                if not open_from[self._source]:
                    del open_from[self._source]
                self._source = None
            if self._look is not None:
                self._look.cancel()
                self._look = None
            super().connection_lost(exc)

        def _look_again(self) -> None:
            self._look = None
            if self.transport.is_closing() or self.transport.get_protocol() is not self:
                return  # closed, or a WebSocket's now
            cycle = self.cycle
            busy = cycle is not None and not cycle.response_complete
            if not busy and cycle is self._seen:
                self.transport.close()
                return
            # While a request runs, nothing is "seen": once it ends, the connection has a whole period to begin the
            # next one (a keep-alive client's next request right after a long answer is not cut off).
            self._seen = _RUNNING if busy else cycle
            self._look = self.loop.call_later(head_seconds, self._look_again)

    Bounded.open_from = open_from  # type: ignore[attr-defined]  # read by tests
    return Bounded
