"""The runtime's sockets (sandstack.runtime.listen): its own address, and the unix socket in its configuration volume
that the host's ingress reaches it by."""

from __future__ import annotations

import asyncio
import socket
import stat

import pytest

from sandstack.runtime.listen import bind, sockets



def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_ingress_socket_beside_the_runtime_s_address_answers_anyone_who_can_open_its_file(tmp_path):
    port, path = _free_port(), tmp_path / "wake.sock"
    listening = sockets("127.0.0.1", port, path)
    try:
        assert [s.getsockname() for s in listening] == [("127.0.0.1", port), str(path)]
        assert path.is_socket() and stat.S_IMODE(path.stat().st_mode) == 0o666
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # the runtime's own address answers as before
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(path))
    finally:
        for s in listening:
            s.close()


def test_a_socket_file_left_by_an_earlier_process_is_replaced(tmp_path):
    path = tmp_path / "wake.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # its file stays, as a stopped runtime's does in the volume
    listening = sockets("127.0.0.1", _free_port(), path)
    try:
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(path))
    finally:
        for s in listening:
            s.close()


def test_a_path_that_is_not_a_socket_is_not_removed_and_nothing_listens(tmp_path):
    path = tmp_path / "wake.sock"
    path.write_text("not a socket")
    port = _free_port()
    with pytest.raises(OSError):
        sockets("127.0.0.1", port, path)
    assert path.read_text() == "not a socket"
    bind("127.0.0.1", port).close()  # the TCP socket was closed again


def test_one_socket_without_a_configuration_volume():
    port = _free_port()
    listening = sockets("127.0.0.1", port, None)
    try:
        assert [s.getsockname() for s in listening] == [("127.0.0.1", port)]
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
