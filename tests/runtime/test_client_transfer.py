"""Files streamed between this machine and a sandbox by the client (Sandbox.upload/download, sync and async) and
by `sandstack sandbox put/get`: the bytes arrive whole, no file is held whole in memory, a download replaces its
destination only when complete, and what cannot be sent again is not retried half-way."""

from __future__ import annotations

import asyncio
import io
import json
import os

import httpx
import pytest

from sandstack.client import AsyncClient, Client, Conflict, HostUnavailable, NotFound, Retry, Sandbox
from sandstack.client.pieces import PIECE
from tests.runtime.served import serve
from tests.runtime.test_client import run_cli

FAST = Retry(attempts=3, backoff=0.001, max_backoff=0.001)
SIZE = 3 * PIECE + 12345  # more than one piece, not a whole number of them


@pytest.fixture
def url(env):
    with serve(env.api.app) as base:
        yield base


def outputs(url: str) -> dict:
    from tests.runtime.conftest import TOKEN

    return {"hosts": {"local": {"url": url, "token": TOKEN}}, "pools": {"py": ["local"], "web": ["local"]}}


def _local(tmp_path):
    """This machine's side of a transfer (tmp_path also holds the fake backend's containers)."""
    local = tmp_path / "local"
    local.mkdir()
    return local


class Recorded(io.BytesIO):
    """A file object that notes the largest single read or write made of it."""

    largest = 0

    def read(self, size: int = -1) -> bytes:
        data = super().read(size)
        self.largest = max(self.largest, len(data))
        return data

    def write(self, data) -> int:
        self.largest = max(self.largest, len(data))
        return super().write(data)


def test_upload_and_download_stream_a_file_sync_and_async_without_holding_it_whole(url, tmp_path):
    tmp_path = _local(tmp_path)
    data = os.urandom(SIZE)
    source = tmp_path / "in.bin"
    source.write_bytes(data)

    with Client.from_outputs(outputs(url), retry=FAST) as client, client.claim("web", "t-sync") as box:
        box.upload("a/in.bin", source)  # a path
        box.upload("a/from-object.bin", Recorded(data))
        assert box.download("a/in.bin", tmp_path / "out.bin") == SIZE
        sink = Recorded()
        assert box.download("a/from-object.bin", sink) == SIZE
        assert (tmp_path / "out.bin").read_bytes() == data and sink.getvalue() == data
        assert sink.largest <= PIECE
        reader = Recorded(data)
        box.upload("a/again.bin", reader)
        assert reader.largest == PIECE  # read a piece at a time, never whole
        assert box.read_file("a/again.bin") == data

    async def session() -> tuple[int, bytes]:
        async with AsyncClient.from_outputs(outputs(url), retry=FAST) as client:
            async with await client.claim("web", "t-async") as box:
                await box.upload("b/in.bin", source)
                await box.upload("b/object.bin", Recorded(data))
                count = await box.download("b/in.bin", tmp_path / "async-out.bin")
                sink = Recorded()
                await box.download("b/object.bin", sink)
                return count, sink.getvalue()

    count, got = asyncio.run(session())
    assert count == SIZE and got == data and (tmp_path / "async-out.bin").read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["async-out.bin", "in.bin", "out.bin"]  # no part file


def test_an_upload_starts_from_where_the_file_object_stands_and_a_pipe_goes_chunked(url, tmp_path):
    with Client.from_outputs(outputs(url), retry=FAST) as client, client.claim("web", "t-pos") as box:
        source = io.BytesIO(b"skip-this|keep this")
        source.seek(10)
        box.upload("pos.txt", source)
        assert box.read_file("pos.txt") == b"keep this"
        read_end, write_end = os.pipe()
        os.write(write_end, b"through a pipe\n")
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            box.upload("pipe.txt", pipe)  # no length known: sent chunked
        assert box.read_file("pipe.txt") == b"through a pipe\n"


def test_a_download_of_a_directory_or_a_missing_file_leaves_the_destination_as_it_was(url, tmp_path):
    tmp_path = _local(tmp_path)
    dest = tmp_path / "dest.txt"
    dest.write_text("before")
    with Client.from_outputs(outputs(url), retry=FAST) as client, client.claim("web", "t-dir") as box:
        box.write_file("d/f.txt", "x")
        with pytest.raises(Conflict) as error:
            box.download("d", dest)
        assert error.value.message == "path 'd' is a directory; use list_dir"
        assert error.value.body == {"path": "d", "type": "dir"}
        with pytest.raises(NotFound):
            box.download("d/missing.txt", dest)
    assert dest.read_text() == "before"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest.txt"]


def _cut_short(request: httpx.Request) -> httpx.Response:
    """An answer that announces 10 bytes and breaks after 4 (the runtime cut short, a connection lost)."""
    def body():
        yield b"half"
        raise httpx.ReadError("connection reset", request=request)

    return httpx.Response(200, headers={"content-length": "10", "content-type": "application/octet-stream"},
                          stream=_Broken(body()))


class _Broken(httpx.SyncByteStream):
    def __init__(self, chunks):
        self.chunks = chunks

    def __iter__(self):
        yield from self.chunks


def _box(handler) -> Sandbox:
    """A sandbox handle on a host answered by `handler`."""
    def factory(endpoint, timeout, headers):
        return httpx.Client(base_url=endpoint.url, headers=headers, transport=httpx.MockTransport(handler))

    host = Client.from_outputs(outputs("http://h.test"), http_factory=factory, retry=FAST).host("local")
    return Sandbox(host, {"sandbox": "sbx-1", "pool": "web", "session": "s-1"})


def test_a_download_that_breaks_keeps_the_old_file_and_leaves_no_part_file(tmp_path):
    dest = tmp_path / "dest.bin"
    dest.write_bytes(b"old")
    box = _box(_cut_short)
    with pytest.raises(HostUnavailable) as error:
        box.download("f.bin", dest)
    assert error.value.message == "does not answer (ReadError)"
    assert dest.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest.bin"]


def test_a_download_shorter_than_announced_is_refused(tmp_path):
    def short(request):  # a body that ends cleanly before the length the runtime announced
        return httpx.Response(200, headers={"content-length": "10"}, stream=_Broken(iter([b"half"])))

    dest = tmp_path / "dest.bin"
    with pytest.raises(HostUnavailable) as error:
        _box(short).download("f.bin", dest)
    assert error.value.message == "the download of 'f.bin' ended after 4 of 10 bytes; nothing was written"
    assert list(tmp_path.iterdir()) == []


def test_a_broken_upload_is_sent_again_from_its_start_and_a_pipe_is_not(tmp_path):
    bodies: list[bytes] = []

    def flaky(request):
        body = b"".join(request.stream)
        bodies.append(body)
        if len(bodies) == 1:
            raise httpx.ReadError("connection reset", request=request)
        return httpx.Response(204)

    source = tmp_path / "in.bin"
    source.write_bytes(os.urandom(PIECE + 7))
    _box(flaky).upload("in.bin", source)
    assert bodies == [source.read_bytes()] * 2

    bodies.clear()
    read_end, write_end = os.pipe()
    os.write(write_end, b"once only")
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe, pytest.raises(HostUnavailable) as error:
        _box(flaky).upload("p.txt", pipe)
    assert bodies == [b"once only"]
    assert error.value.message == ("the upload from a file object broke after it began and its source cannot be read "
                                   "again from the start (a pipe); nothing was kept: upload it again")


def test_cli_put_and_get_stream_files_and_list_directories(url, tmp_path, monkeypatch, capsys):
    out_file = tmp_path / "outputs.json"
    out_file.write_text(json.dumps(outputs(url)))
    factory = lambda endpoint, timeout, headers: httpx.Client(base_url=endpoint.url, headers=headers,  # noqa: E731
                                                              timeout=timeout)
    code, out = run_cli(["claim", "web", "cli-1"], out_file, factory, monkeypatch, capsys)
    ref = out.out.strip()
    data = os.urandom(PIECE + 99)
    (tmp_path / "in.bin").write_bytes(data)
    assert run_cli(["put", ref, "d/in.bin", str(tmp_path / "in.bin")], out_file, factory, monkeypatch, capsys)[0] == 0
    code, _ = run_cli(["get", ref, "d/in.bin", "-o", str(tmp_path / "got.bin")], out_file, factory, monkeypatch,
                      capsys)
    assert code == 0 and (tmp_path / "got.bin").read_bytes() == data
    code, out = run_cli(["get", ref, "d"], out_file, factory, monkeypatch, capsys)
    assert (code, out.out) == (0, f"file  {len(data):>10} in.bin\n")
    code, out = run_cli(["put", ref, "x", str(tmp_path / "missing.bin")], out_file, factory, monkeypatch, capsys)
    assert (code, out.err) == (2, f"sandstack sandbox: {tmp_path / 'missing.bin'}: no such file\n")


def test_progress_is_reported_after_each_piece_sync_and_async(url, tmp_path):
    tmp_path = _local(tmp_path)
    data = os.urandom(SIZE)
    up, down = [], []
    with Client.from_outputs(outputs(url), retry=FAST) as client, client.claim("web", "t-progress") as box:
        box.upload("p.bin", io.BytesIO(data), lambda done, total: up.append((done, total)))
        box.download("p.bin", tmp_path / "p.bin", lambda done, total: down.append((done, total)))
    assert up == [(PIECE, SIZE), (2 * PIECE, SIZE), (3 * PIECE, SIZE), (SIZE, SIZE)]
    assert down[-1] == (SIZE, SIZE) and all(total == SIZE for _, total in down)
    assert [done for done, _ in down] == sorted({done for done, _ in down})  # rising, one report per piece

    async def session() -> tuple[list, list]:
        a_up, a_down = [], []
        async with AsyncClient.from_outputs(outputs(url), retry=FAST) as client:
            async with await client.claim("web", "t-aprogress") as box:
                await box.upload("p.bin", io.BytesIO(data), lambda done, total: a_up.append((done, total)))
                await box.download("p.bin", io.BytesIO(), lambda done, total: a_down.append((done, total)))
        return a_up, a_down

    a_up, a_down = asyncio.run(session())
    assert a_up == up
    assert a_down[-1] == (SIZE, SIZE) and all(total == SIZE for _, total in a_down)
    assert all(done >= (i + 1) * PIECE for i, (done, _) in enumerate(a_down[:-1]))  # written a MiB or more at a time


def test_cli_draws_a_progress_bar_only_on_a_terminal(url, tmp_path, monkeypatch, capsys):
    from sandstack.tooling import sandbox_cli

    out_file = tmp_path / "outputs.json"
    out_file.write_text(json.dumps(outputs(url)))
    factory = lambda endpoint, timeout, headers: httpx.Client(base_url=endpoint.url, headers=headers,  # noqa: E731
                                                              timeout=timeout)
    ref = run_cli(["claim", "web", "cli-bar"], out_file, factory, monkeypatch, capsys)[1].out.strip()
    (tmp_path / "in.bin").write_bytes(os.urandom(2 * PIECE))
    code, out = run_cli(["put", ref, "in.bin", str(tmp_path / "in.bin")], out_file, factory, monkeypatch, capsys)
    assert (code, out.err) == (0, "")  # not a terminal: nothing drawn
    monkeypatch.setattr(sandbox_cli, "_terminal", lambda: True)
    code, out = run_cli(["put", ref, "in.bin", str(tmp_path / "in.bin")], out_file, factory, monkeypatch, capsys)
    assert code == 0 and "put in.bin" in out.err  # rich's bar (its figures are rich's wording: not asserted)
    code, out = run_cli(["get", ref, "in.bin", "-o", str(tmp_path / "got.bin")], out_file, factory, monkeypatch,
                        capsys)
    assert code == 0 and "get in.bin" in out.err
    (tmp_path / "note.txt").write_text("a note\n")
    run_cli(["put", ref, "note.txt", str(tmp_path / "note.txt")], out_file, factory, monkeypatch, capsys)
    code, out = run_cli(["get", ref, "note.txt"], out_file, factory, monkeypatch, capsys)
    assert (code, out.out, out.err) == (0, "a note\n", "")  # to stdout: no bar beside the bytes
