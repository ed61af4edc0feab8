"""The sync client: Client, HostClient (one host's runtime, every endpoint) and Sandbox (a claimed sandbox's
handle), with the methods, arguments and results of their async classes (sandstack.client.async_client), not
awaited. Each is made from its async class by sandstack.client.blocking, over an httpx.Client."""

from __future__ import annotations

from typing import Callable

import httpx

from sandstack.client.async_client import (  # noqa: F401  (names of this module before the client was one)
    ACTOR_HEADER,
    CREATING_POLL,
    DOWN_FOR,
    AsyncClient,
    AsyncHostClient,
    AsyncSandbox,
    SnapshotRef,
    answer_error,
    hosts_in_order,
)
from sandstack.client.blocking import SYNC_CHECKS, SYNC_DEFAULTS, sync_face
from sandstack.client.endpoints import HostEndpoint
from sandstack.client.errors import HostUnavailable  # noqa: F401
from sandstack.client.process import Process  # noqa: F401
from sandstack.client.transport import POOL

HttpFactory = Callable[[HostEndpoint, float, dict[str, str]], httpx.Client]


def _default_http(endpoint: HostEndpoint, timeout: float, headers: dict[str, str]) -> httpx.Client:
    """Safe to share between threads, however many (sandstack.client.transport.POOL)."""
    return httpx.Client(base_url=endpoint.url, headers=headers, timeout=timeout, limits=POOL)


def _sync_only(factory: HttpFactory) -> HttpFactory:
    """A factory the sync client was given, refusing an httpx.AsyncClient when it makes one (its calls would wait on
    an event loop the sync client does not run)."""
    def made(endpoint: HostEndpoint, timeout: float, headers: dict[str, str]) -> httpx.Client:
        http = factory(endpoint, timeout, headers)
        if isinstance(http, httpx.AsyncClient):
            raise TypeError(f"http_factory made an httpx.AsyncClient for host {endpoint.name!r}: the sync client "
                            "takes an httpx.Client (an httpx.AsyncClient is for AsyncClient, AsyncHostClient)")
        return http
    return made


SYNC_DEFAULTS["http_factory"] = _default_http
SYNC_CHECKS["http_factory"] = _sync_only

HostClient = sync_face(AsyncHostClient, "HostClient", __name__)
Sandbox = sync_face(AsyncSandbox, "Sandbox", __name__)
Client = sync_face(AsyncClient, "Client", __name__)
