"""The runtime's listening sockets: its `listen` address, and a unix socket in its configuration volume
(sandstack.spec.contract.WAKE_SOCKET), where the host's ingress wakes a site's sandbox and checks a visitor's session
token (docs/design/ondemand.md). The ingress mounts that volume read-only: a socket is reached by its file, so the
runtime listens on no address of the ingress's network, and an ingress added to the host changes none of its inputs.

The TCP socket is made with the protocol named (IPPROTO_TCP), not left 0: asyncio turns Nagle's algorithm off
(TCP_NODELAY) on an accepted connection only when its socket's `proto` says TCP, and an accepted socket inherits the
listening one's. With Nagle on, an answer's body (uvicorn writes it after the headers) waited for the client's delayed
ACK of the headers: ~40 ms added to about one short call in twenty (issue 22's claim p99 at 200 sessions: runtime
2-6 ms, client 48-57 ms on the slowest ones).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Callable

BACKLOG = 2048  # uvicorn's default
# Anyone who can open the file may connect: only the runtime and the ingress mount the volume, and every route the
# ingress uses asks for its own token.
SOCKET_MODE = 0o666


def _listening(sock: socket.socket, prepare: Callable[[socket.socket], object]) -> socket.socket:
    """`sock` prepared (options, bound) and listening without blocking; closed again if any step fails."""
    try:
        prepare(sock)
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def bind(address: str, port: int) -> socket.socket:
    def prepare(sock: socket.socket) -> None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
    return _listening(socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP), prepare)


def bind_unix(path: Path) -> socket.socket:
    """A socket at `path`; a file left there by a process before this one is replaced (a socket's file outlives it)."""
    def prepare(sock: socket.socket) -> None:
        if path.is_socket():
            path.unlink()
        sock.bind(str(path))
        os.chmod(path, SOCKET_MODE)
    return _listening(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), prepare)


def sockets(listen: str, port: int, wake_socket: Path | None) -> list[socket.socket]:
    """One socket on `listen`, and the ingress's at `wake_socket` when the runtime has a configuration volume."""
    out = [bind(listen, port)]
    if wake_socket is not None:
        try:
            out.append(bind_unix(wake_socket))
        except OSError:
            out[0].close()
            raise
    return out
