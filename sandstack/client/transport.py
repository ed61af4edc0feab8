"""Everything the client's two faces do differently, in one place: the client is written once, as coroutines
(sandstack.client.async_client), which reach the runtime only through one of these two ports.

`AsyncIO` awaits an httpx.AsyncClient. `SyncIO` calls an httpx.Client: each of its coroutines blocks in its
caller's thread and returns without ever suspending, so a coroutine of the client over it ends on its first step,
with no event loop (sandstack.client.blocking runs them so: the sync face). Which port a host client gets follows
from what its `http_factory` made."""

from __future__ import annotations

import asyncio
import inspect
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

import httpx
from httpx_ws import aconnect_ws, connect_ws

from sandstack.client.pieces import PIECE, in_pieces
from sandstack.client.transfer import AsyncFileBody, FileBody

# The connections a host client's default httpx client keeps to its runtime: as many as it may open, and kept until
# the runtime closes them. httpcore 1.0.9's pool (httpx's) can close a connection it has just handed to a request
# that has not started on it yet: as a "surplus" keep-alive connection whenever it holds more connections than it
# keeps (httpx's default: 100 open, 20 kept), or as expired when the keep-alive expiry passes in between. When the
# request has started meanwhile, its socket is closed under it and it waits for its read timeout
# (encode/httpcore#1110): one claim of a 200-thread burst waited 300 s so. Kept = open, one origin per httpx client
# and no expiry leave the pool no idle connection to close but one the runtime has closed already (uvicorn closes an
# idle one after 5 s; the pool sees that and drops it). 100 open: httpx's default, a fifth of the runtime's bound per
# source address (sandstack.runtime.connections.PER_SOURCE); more threads than that share them (they wait in the
# pool's queue, which is safe).
CONNECTIONS = 100
POOL = httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS, keepalive_expiry=None)


async def settle(value: Any) -> Any:
    """`value`, awaited when it is awaitable: a WebSocket session's calls answer at once (sync) or are awaited."""
    return await value if inspect.isawaitable(value) else value


class SyncIO:
    blocking = True
    batch = 1  # a download's bytes are written as they come
    body = FileBody  # httpx's sync transport sends an iterable

    def __init__(self, http: httpx.Client):
        self.http = http

    @asynccontextmanager
    async def send(self, method: str, path: str, streaming: bool, **kwargs: Any) -> AsyncIterator[httpx.Response]:
        """The answer, read whole (`streaming`: its head only; the body is read as it comes)."""
        # A large body in pieces: httpcore's sync send copies what is left of a bytes body at every write.
        kwargs = in_pieces(kwargs)
        if not streaming:
            yield self.http.request(method, path, **kwargs)
            return
        with self.http.stream(method, path, **kwargs) as response:
            yield response

    async def read(self, response: httpx.Response) -> bytes:
        return response.read()

    async def lines(self, response: httpx.Response) -> AsyncIterator[str]:
        for line in response.iter_lines():
            yield line

    async def chunks(self, response: httpx.Response) -> AsyncIterator[bytes]:
        for chunk in response.iter_bytes():
            yield chunk

    async def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    async def call(self, function: Callable[..., Any], *args: Any) -> Any:
        """Disk work (a file read or written): here, in the caller's thread."""
        return function(*args)

    @asynccontextmanager
    async def websocket(self, path: str, params: dict[str, Any]) -> AsyncIterator[Any]:
        with connect_ws(path, self.http, params=params) as ws:
            yield ws

    async def close(self) -> None:
        self.http.close()


class AsyncIO:
    blocking = False
    batch = PIECE  # a download is written a MiB at a time: one hop to a thread per MiB, not per read
    body = AsyncFileBody

    def __init__(self, http: httpx.AsyncClient):
        self.http = http

    @asynccontextmanager
    async def send(self, method: str, path: str, streaming: bool, **kwargs: Any) -> AsyncIterator[httpx.Response]:
        if not streaming:  # anyio's transport writes a bytes body in place: no pieces
            yield await self.http.request(method, path, **kwargs)
            return
        async with self.http.stream(method, path, **kwargs) as response:
            yield response

    async def read(self, response: httpx.Response) -> bytes:
        return await response.aread()

    def lines(self, response: httpx.Response) -> AsyncIterator[str]:
        return response.aiter_lines()

    def chunks(self, response: httpx.Response) -> AsyncIterator[bytes]:
        return response.aiter_bytes()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def call(self, function: Callable[..., Any], *args: Any) -> Any:
        """Disk work, in a thread: the event loop never waits on the disk."""
        return await asyncio.to_thread(function, *args)

    def websocket(self, path: str, params: dict[str, Any]) -> Any:
        return aconnect_ws(path, self.http, params=params)

    async def close(self) -> None:
        await self.http.aclose()


def port_for(http: httpx.Client | httpx.AsyncClient) -> SyncIO | AsyncIO:
    if isinstance(http, httpx.AsyncClient):
        return AsyncIO(http)
    if isinstance(http, httpx.Client):
        return SyncIO(http)
    raise TypeError(f"http_factory: expected an httpx.Client or httpx.AsyncClient, got {type(http).__name__}")
