"""The runtime's sockets (sandstack.runtime.listen): its own address, and the host's address on the ingress's
network, bound even before that address exists (the bridge may be made after the runtime starts)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from sandstack.runtime.listen import bind, sockets

ABSENT = "192.0.2.77"  # TEST-NET-1: no interface of this machine holds it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_second_socket_on_the_wake_address_even_before_the_host_holds_it():
    port = _free_port()
    listening = sockets("127.0.0.1", port, ABSENT)
    try:
        assert [s.getsockname() for s in listening] == [("127.0.0.1", port), (ABSENT, port)]
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # the runtime's own address answers as before
    finally:
        for s in listening:
            s.close()


def test_without_freebind_an_absent_address_cannot_be_bound():
    # What IP_FREEBIND is for: the same bind without it fails.
    with pytest.raises(OSError):
        bind(ABSENT, _free_port()).close()


@pytest.mark.parametrize(("listen", "wake"), [("127.0.0.1", None), ("0.0.0.0", ABSENT), ("127.0.0.1", "127.0.0.1")])
def test_one_socket_when_the_wake_address_is_none_or_covered(listen, wake):
    port = _free_port()
    listening = sockets(listen, port, wake)
    try:
        assert [s.getsockname() for s in listening] == [(listen, port)]
    finally:
        for s in listening:
            s.close()


def test_connections_the_server_accepts_have_nagle_off():
    """asyncio sets TCP_NODELAY on an accepted connection only when the listening socket says TCP as its protocol;
    without it a short answer's body waits for the client's delayed ACK of its headers (~40 ms)."""
    port = _free_port()
    listening = sockets("127.0.0.1", port, None)
    seen: list[int] = []

    async def main() -> None:
        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.append(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(accepted, sock=listening[0])  # as uvicorn serves the given sockets
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            await reader.read()
            writer.close()

    try:
        asyncio.run(main())
    finally:
        for s in listening:
            s.close()
    assert len(seen) == 1 and seen[0] != 0
