"""A large request body sent in pieces by the sync client.

httpx's sync transport (httpcore) sends a body given as bytes with `send` in a loop that slices off what each call
took: every slice copies the rest of the body, so a 100 MiB upload copied gigabytes and ran at a quarter of the
speed of the runtime's side. Given as PIECE-sized views of the same bytes, with its length declared (so no chunked
encoding), each send copies one piece at most. The async transport (anyio) buffers a body in place: it is sent as
given there.
"""

from __future__ import annotations

from typing import Any, Iterator

PIECE = 1024 * 1024  # bytes per send


class Pieces:
    """The body as views of PIECE bytes; iterable again (a retried request sends it whole again)."""

    def __init__(self, data: bytes):
        self.data = data

    def __iter__(self) -> Iterator[memoryview]:
        view = memoryview(self.data)
        for start in range(0, len(view), PIECE):
            yield view[start:start + PIECE]


def in_pieces(options: dict[str, Any]) -> dict[str, Any]:
    """httpx's request options with a body larger than one piece given as Pieces, its length in the headers."""
    content = options.get("content")
    if not isinstance(content, (bytes, bytearray)) or len(content) <= PIECE:
        return options
    headers = {**(options.get("headers") or {}), "Content-Length": str(len(content))}
    return {**options, "content": Pieces(content), "headers": headers}
