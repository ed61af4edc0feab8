"""What the runtime's engine tests share: whether a host's runtime answers, and putting a pool back idle."""

from __future__ import annotations

import httpx

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
