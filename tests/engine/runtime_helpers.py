"""What the runtime's engine tests share: whether a host's runtime answers, a client of it, and putting a pool
back idle."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterable, Iterator

import httpx

from sandstack.client import Client
from sandstack.client.client import HostClient


def answers(port: int) -> bool:
    """The runtime on this host's loopback answers its health check."""
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def release_all(host: HostClient) -> None:
    """Releases every session still bound on the host, whatever a test left behind."""
    for sandbox in host.sandboxes():
        if sandbox.get("session"):
            host.release(sandbox["session"])


@contextmanager
def local_client(port: int, token: str, pools: Iterable[str], **options) -> Iterator[Client]:
    """A client of the runtime on this host's loopback for `pools` (the stack's one host, 'local'); afterwards every
    session still bound there is released and the client closed."""
    client = Client.from_outputs({"hosts": {"local": {"url": f"http://127.0.0.1:{port}", "token": token}},
                                  "pools": {pool: ["local"] for pool in pools}}, actor="engine-test", **options)
    yield client
    release_all(client.host("local"))
    client.close()
