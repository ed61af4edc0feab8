"""The runtime's listening sockets: its `listen` address, and the host's address on the ingress's network
(`RuntimeConfig.wake_listen`), where the ingress wakes a site's sandbox (docs/design/ondemand.md).

The second one is bound with IP_FREEBIND: the ingress's bridge (and so its address) may be made after the runtime
starts, or made again when Pulumi replaces the network; a socket bound to an address the host does not hold yet
accepts connections to it once it does, so the runtime needs no ordering against the network nor a restart.

Both are made with the protocol named (IPPROTO_TCP), not left 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) on
an accepted connection only when its socket's `proto` says TCP, and an accepted socket inherits the listening one's.
With Nagle on, an answer's body (uvicorn writes it after the headers) waited for the client's delayed ACK of the
headers: ~40 ms added to about one short call in twenty (issue 22's claim p99 at 200 sessions: runtime 2-6 ms, client
48-57 ms on the slowest ones).
"""

from __future__ import annotations

import socket

BACKLOG = 2048  # uvicorn's default
IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)  # Linux; not in every Python's socket module


def bind(address: str, port: int, *, freebind: bool = False) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if freebind:
            sock.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
        sock.bind((address, port))
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def sockets(listen: str, port: int, wake_listen: str | None) -> list[socket.socket]:
    """One socket on `listen`, and one on `wake_listen` unless `listen` covers every address already."""
    out = [bind(listen, port)]
    if wake_listen and listen != "0.0.0.0" and wake_listen != listen:
        try:
            out.append(bind(wake_listen, port, freebind=True))
        except OSError:
            out[0].close()
            raise
    return out
