"""The runtime's bounds on connections (sandstack.runtime.connections), served by uvicorn on this machine's
loopback: a stalled request head is closed, a request running past the deadline is not, a keep-alive connection and
a WebSocket keep working, and one source past its share of connections has each new one closed while another source
is served. Issue 34 item 9: 19,995 stalled heads filled the runtime's descriptors. Each with both of uvicorn's
parsers: httptools (the runtime's image has it) and h11 (where httptools is not installed)."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
import wsproto
from wsproto.events import AcceptConnection, Message, Request, TextMessage

from sandstack.runtime.connections import bounded_protocol, parser_protocol
from tests.runtime.served import serve

PARSERS = pytest.mark.parametrize("parser", ["httptools", "h11"])
HEAD = b"GET / HTTP/1.1\r\nHost: runtime\r\n"


async def app(scope, receive, send):
    if scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        while (event := await receive())["type"] == "websocket.receive":
            await send({"type": "websocket.send", "text": "echo " + event["text"]})
        return
    if scope["path"] == "/slow":
        await asyncio.sleep(1.5)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def _connect(url: str, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))
    s.connect(_address(url))
    s.settimeout(10)
    return s


def _closed(s: socket.socket) -> bool:
    """True when the server closed the connection (end of stream or reset) within the socket's timeout."""
    try:
        return s.recv(1024) == b""
    except ConnectionResetError:
        return True


def _get(s: socket.socket, path: str = "/") -> bytes:
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: runtime\r\n\r\n".encode())
    answer = b""
    while not answer.endswith(b"ok"):
        chunk = s.recv(1024)
        assert chunk, f"closed after {answer!r}"
        answer += chunk
    return answer.split(b"\r\n", 1)[0]


@PARSERS
def test_a_stalled_request_head_is_closed_and_other_callers_are_served(parser):
    with serve(app, http=bounded_protocol(head_seconds=0.3, parser=parser)) as url:
        stalled = _connect(url)
        stalled.sendall(HEAD)  # no blank line: the head never ends
        assert _closed(stalled)
        with _connect(url) as fresh:
            assert _get(fresh) == b"HTTP/1.1 200 OK"


def test_without_the_bound_uvicorn_holds_a_stalled_head():
    # What the bound is for: uvicorn's own protocol keeps the connection.
    with serve(app, http="h11") as url, _connect(url) as stalled:
        stalled.sendall(HEAD)
        stalled.settimeout(1.5)
        with pytest.raises(socket.timeout):
            stalled.recv(1024)


@PARSERS
def test_a_request_running_past_the_deadline_and_a_kept_alive_connection_are_served(parser):
    with serve(app, http=bounded_protocol(head_seconds=0.3, parser=parser)) as url, _connect(url) as s:
        assert _get(s, "/slow") == b"HTTP/1.1 200 OK"  # 1.5 s: five deadlines
        assert _get(s) == b"HTTP/1.1 200 OK"  # the same connection, kept alive


@PARSERS
def test_a_websocket_outlives_the_deadline(parser):
    with serve(app, http=bounded_protocol(head_seconds=0.3, parser=parser), ws="wsproto") as url, _connect(url) as s:
        ws = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
        s.sendall(ws.send(Request(host="runtime", target="/terminal")))
        events: list = []
        while not any(isinstance(e, AcceptConnection) for e in events):
            ws.receive_data(s.recv(4096))
            events += list(ws.events())
        time.sleep(1.2)  # four deadlines
        s.sendall(ws.send(Message(data="hi")))
        texts: list[str] = []
        while not texts:
            ws.receive_data(s.recv(4096))
            texts = [e.data for e in ws.events() if isinstance(e, TextMessage)]
        assert texts == ["echo hi"]


@PARSERS
def test_a_source_past_its_share_has_each_new_connection_closed_while_another_source_is_served(parser):
    protocol = bounded_protocol(head_seconds=60, per_source=4, parser=parser)
    with serve(app, http=protocol) as url:
        held = [_connect(url) for _ in range(4)]
        try:
            for s in held:  # each one accepted (served), so the count is the server's, not the backlog's
                assert _get(s) == b"HTTP/1.1 200 OK"
            extra = _connect(url)
            assert _closed(extra)
            with _connect(url, source="127.0.0.2") as other:
                assert _get(other) == b"HTTP/1.1 200 OK"
            held.pop().close()
            deadline = time.monotonic() + 10
            while protocol.open_from["127.0.0.1"] > 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            with _connect(url) as again:  # a share freed: served again
                assert _get(again) == b"HTTP/1.1 200 OK"
        finally:
            for s in held:
                s.close()


def test_the_parser_is_httptools_where_it_imports_else_h11(monkeypatch):
    import sys

    from uvicorn.protocols.http.h11_impl import H11Protocol
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    assert parser_protocol() is HttpToolsProtocol
    assert issubclass(bounded_protocol(), HttpToolsProtocol)
    monkeypatch.setitem(sys.modules, "httptools", None)  # not installed: its import fails
    assert parser_protocol() is H11Protocol
    assert issubclass(bounded_protocol(), H11Protocol)
    with pytest.raises(ValueError, match="parser 'h2': expected 'auto', 'httptools' or 'h11'"):
        parser_protocol("h2")
