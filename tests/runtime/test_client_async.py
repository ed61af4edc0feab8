"""The client's sync and async forms against a served runtime (fake backend): the same results, typed; processes
followed as they write; context managers that release; typed errors; retries on the same host before failover;
`sandstack sandbox exec --stream`."""

from __future__ import annotations

import asyncio
import inspect
import json

import httpx
import pytest

from sandstack.client import (
    AsyncClient,
    AsyncHostClient,
    AsyncProcess,
    AsyncSandbox,
    Client,
    CommandFailed,
    Conflict,
    ExecResult,
    FileEntry,
    HostClient,
    HostEndpoint,
    HostUnavailable,
    InvalidRequest,
    NoCapacity,
    NotFound,
    Process,
    ProcessInfo,
    Retry,
    Sandbox,
    SandboxInfo,
    Timeout,
    Unauthorized,
    Unavailable,
)
from tests.runtime.conftest import PY, TOKEN, hk
from tests.runtime.served import serve
from tests.runtime.test_client import run_cli

FAST = Retry(attempts=3, backoff=0.001, max_backoff=0.001)


@pytest.fixture
def url(env):
    with serve(env.api.app) as base:
        yield base


def outputs(url: str, token: str = TOKEN) -> dict:
    return {"hosts": {"local": {"url": url, "token": token}}, "pools": {"py": ["local"], "web": ["local"]}}


def _streamed(events: list[tuple[str, str]]) -> tuple[list[str], str]:
    """The streams a process's events came on and their text in order. Not the events themselves: how many lines
    one event holds is how fast the runtime read the pipe (a busy machine joins lines written 50 ms apart)."""
    return sorted({kind for kind, _ in events}), "".join(text for _, text in events)


def sync_session(url: str) -> dict:
    with Client.from_outputs(outputs(url), retry=FAST) as client:
        with client.claim("py", "same-1") as sandbox:
            ran = sandbox.exec(["sh", "-c", "echo hi; echo err >&2; exit 2"])
            sandbox.write_file("d/f.txt", "data")
            listed = sandbox.list_dir("d")
            proc = sandbox.start(script="for i in 1 2 3; do echo $i; sleep 0.05; done")
            streamed = _streamed([(e.kind, e.text) for e in proc])
            ended = proc.wait(10)
            cat = sandbox.start(["cat"], stdin=True)
            cat.write_stdin("round trip\n")
            cat.close_stdin()
            echoed = "".join(e.text for e in cat)
            status = sandbox.status()
        return {"exec": ran, "list": listed, "stream": streamed, "ended": (ended.status, ended.exit_code),
                "stdin": echoed, "status": status.status, "released": client.host("local").sandboxes("py")}


async def async_session(url: str) -> dict:
    async with AsyncClient.from_outputs(outputs(url), retry=FAST) as client:
        async with await client.claim("py", "same-1") as sandbox:
            ran = await sandbox.exec(["sh", "-c", "echo hi; echo err >&2; exit 2"])
            await sandbox.write_file("d/f.txt", "data")
            listed = await sandbox.list_dir("d")
            proc = await sandbox.start(script="for i in 1 2 3; do echo $i; sleep 0.05; done")
            streamed = _streamed([(e.kind, e.text) async for e in proc])
            ended = await proc.wait(10)
            cat = await sandbox.start(["cat"], stdin=True)
            await cat.write_stdin("round trip\n")
            await cat.close_stdin()
            echoed = "".join([e.text async for e in cat])
            status = await sandbox.status()
        return {"exec": ran, "list": listed, "stream": streamed, "ended": (ended.status, ended.exit_code),
                "stdin": echoed, "status": status.status, "released": await client.host("local").sandboxes("py")}


def test_sync_and_async_clients_give_the_same_results(url):
    sync = sync_session(url)
    asynchronous = asyncio.run(async_session(url))
    for result in (sync, asynchronous):
        assert isinstance(result["exec"], ExecResult) and (result["exec"].stdout, result["exec"].stderr,
                                                           result["exec"].exit_code) == ("hi\n", "err\n", 2)
        assert result["list"] == [FileEntry("f.txt", "file", 4, "0644")]
        assert result["stream"] == (["stdout"], "1\n2\n3\n")
        assert result["ended"] == ("exited", 0) and result["stdin"] == "round trip\n"
        assert result["status"] == "bound"
        assert all(row["session"] is None for row in result["released"])  # the `with` released it
    assert {k: v for k, v in sync.items() if k != "exec"} == {k: v for k, v in asynchronous.items() if k != "exec"}
    assert sync["exec"] == asynchronous["exec"] or sync["exec"].stdout == asynchronous["exec"].stdout


@pytest.mark.parametrize("sync_cls, async_cls", [(Client, AsyncClient), (HostClient, AsyncHostClient),
                                                 (Sandbox, AsyncSandbox), (Process, AsyncProcess)])
def test_the_async_client_has_the_sync_clients_surface(sync_cls, async_cls):
    def surface(cls):
        return {name: [p for p in inspect.signature(f).parameters] for name, f in vars(cls).items()
                if callable(f) and not name.startswith("_")}
    sync, asynchronous = surface(sync_cls), surface(async_cls)
    assert sync == asynchronous


def test_results_are_typed_and_still_read_as_the_dicts_of_before(url):
    with Client.from_outputs(outputs(url)) as client:
        sandbox = client.claim("py", "typed")
        result = sandbox.exec(["true"])
        assert result["exit_code"] == 0 and result.get("message") is None and result.ok
        assert isinstance(sandbox.status(), SandboxInfo) and sandbox.status()["status"] == "bound"
        assert isinstance(sandbox.processes(), list)
        with pytest.raises(CommandFailed) as failed:
            sandbox.exec(["sh", "-c", "echo boom >&2; exit 5"], check=True)
        assert (failed.value.result.exit_code, failed.value.message) == (5, "command exited with 5: boom")
        proc = sandbox.start(["sleep", "30"])
        assert isinstance(proc.info, ProcessInfo) and proc.info.running
        with pytest.raises(Timeout) as waited:
            proc.wait(timeout=0.2)
        assert waited.value.message == f"process {proc.id!r} still runs after 0.2s"
        assert proc.kill().status == "killed"
        sandbox.release()


def test_errors_are_typed_by_status(url, env):
    with Client.from_outputs(outputs(url), retry=FAST) as client:
        with pytest.raises(NotFound, match="sandbox 'nope' is not on host 'local'"):
            client.sandbox("local/nope")
        sandbox = client.claim("py", "errors")
        with pytest.raises(InvalidRequest):
            sandbox.exec([])
        with pytest.raises(NotFound, match="process 'proc-0000000000000000' is not in sandbox"):
            sandbox.process("proc-0000000000000000")
        sandbox.pause()
        with pytest.raises(Conflict, match="is paused"):
            sandbox.exec(["true"])
        sandbox.resume()
        for i in range(1, 4):
            client.claim("py", f"errors-{i}")
        with pytest.raises(NoCapacity):
            client.claim("py", "errors-5")
    with Client.from_outputs(outputs(url, token="wrong-token-0123456789")) as bad:
        with pytest.raises(Unauthorized):
            bad.host("local").pools()


def counting(answers: list):
    """A transport that answers each request with the next of `answers` (an exception or a status + body)."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.method)
        answer = answers.pop(0)
        if isinstance(answer, type) and issubclass(answer, Exception):
            raise answer("down", request=request)
        status, body = answer
        return httpx.Response(status, json=body)
    return handler, seen


def host_with(handler, retry=FAST) -> HostClient:
    return HostClient(HostEndpoint("h", "http://h.test", TOKEN), retry=retry,
                      http_factory=lambda e, t, h: httpx.Client(base_url=e.url, transport=httpx.MockTransport(handler)))


def test_connection_errors_and_503_are_retried_on_the_same_host_with_a_bound():
    handler, seen = counting([httpx.ConnectError, (503, {"error": "the Docker daemon of host 'h' does not answer"}),
                              (200, [])])
    assert host_with(handler).pools() == [] and seen == ["GET"] * 3
    handler, seen = counting([httpx.ConnectError] * 3)
    with pytest.raises(HostUnavailable, match=r"^h: does not answer \(ConnectError\)$"):
        host_with(handler).pools()
    assert len(seen) == 3  # the bound: three tries in all; then the host is lost (the claim fails over)
    # No capacity is not waited for: the claim moves to the pool's next host at once.
    handler, seen = counting([(503, {"error": "no capacity: every sandbox of pool 'py' on host 'h' is in use"})])
    with pytest.raises(NoCapacity):
        host_with(handler).claim("py", "s")
    assert seen == ["POST"]
    # A POST whose connection broke after it was sent is not sent twice (it could start a command twice).
    handler, seen = counting([httpx.ReadError, (200, {})])
    with pytest.raises(HostUnavailable, match=r"^h: does not answer \(ReadError\)$"):
        host_with(handler).exec("sb", command=["true"])
    assert seen == ["POST"]
    handler, seen = counting([(503, {"error": "down"})] * 3)
    with pytest.raises(Unavailable):
        host_with(handler).pools()


def test_the_async_client_retries_as_the_sync_one():
    handler, seen = counting([httpx.ConnectError, (200, [])])
    host = AsyncHostClient(HostEndpoint("h", "http://h.test", TOKEN), retry=FAST, http_factory=lambda e, t, h:
                           httpx.AsyncClient(base_url=e.url, transport=httpx.MockTransport(handler)))
    assert asyncio.run(host.pools()) == [] and seen == ["GET", "GET"]


def test_a_release_whose_answer_was_lost_is_done_not_not_found_sync_and_async():
    gone = (404, {"error": "session 's' is not on host 'h'"})
    info = {"sandbox": "sb", "pool": "py", "host": "h", "status": "idle"}
    # The first DELETE broke once sent (the runtime may have released and answered into the lost connection); the
    # retry's 404 means the session is gone, as asked: the sandbox as it is now is the answer.
    handler, seen = counting([httpx.ReadError, gone, (200, info)])
    released = Sandbox(host_with(handler), {"sandbox": "sb", "pool": "py", "session": "s"}).release()
    assert (released.sandbox, released.status, seen) == ("sb", "idle", ["DELETE", "DELETE", "GET"])

    handler, seen = counting([httpx.RemoteProtocolError, gone, (200, info)])
    host = AsyncHostClient(HostEndpoint("h", "http://h.test", TOKEN), retry=FAST, http_factory=lambda e, t, h:
                           httpx.AsyncClient(base_url=e.url, transport=httpx.MockTransport(handler)))
    released = asyncio.run(AsyncSandbox(host, {"sandbox": "sb", "pool": "py", "session": "s"}).release())
    assert (released.status, seen) == ("idle", ["DELETE", "DELETE", "GET"])
    # A first try that never connected reached nothing: its 404 is the session's own (never claimed, or released).
    handler, seen = counting([httpx.ConnectError, gone])
    with pytest.raises(NotFound, match="session 's' is not on host 'h'"):
        host_with(handler).release("s")
    handler, seen = counting([gone])
    with pytest.raises(NotFound):
        host_with(handler).release("s")
    assert seen == ["DELETE"]


def test_cli_exec_stream_prints_output_as_it_comes_and_exits_with_its_status(url, tmp_path, monkeypatch, capsys):
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs(url)))
    with Client.from_outputs(outputs(url)) as client:
        ref = client.claim("py", "cli-stream").ref
    code, out = run_cli(["exec", "--stream", ref, "--", "sh", "-c", "echo a; echo b >&2; echo c; exit 3"], path,
                        lambda e, t, h: httpx.Client(base_url=e.url, headers=h, timeout=t), monkeypatch, capsys)
    assert (code, out.out, out.err) == (3, "a\nc\n", "b\n"), out


class _Breaks(httpx.SyncByteStream, httpx.AsyncByteStream):
    """An SSE body that sends one event, then loses its connection."""

    EVENT = b'id: 2\nevent: stdout\ndata: {"text":"a\\n"}\n\n'

    def __iter__(self):
        yield self.EVENT
        raise httpx.ReadError("connection lost")

    async def __aiter__(self):
        yield self.EVENT
        raise httpx.ReadError("connection lost")


def _stream_answers(answers: list):
    """Like `counting`, where a 'breaks' answer is an SSE stream that fails after its first event."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.params.get("after", ""))
        answer = answers.pop(0)
        if answer == "breaks":
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_Breaks())
        raise answer("down", request=request)
    return handler, seen


def _process(host) -> tuple:
    info = ProcessInfo.of({"id": "proc-1", "sandbox": "sb", "session": "s", "status": "running"})
    sandbox = (AsyncSandbox if isinstance(host, AsyncHostClient) else Sandbox)(
        host, {"sandbox": "sb", "pool": "py", "session": "s"})
    return (AsyncProcess if isinstance(host, AsyncHostClient) else Process)(sandbox, info)


BROKEN = ["breaks", "breaks", httpx.ConnectError, httpx.ConnectError, httpx.ConnectError]


def test_a_stream_raises_the_typed_errors_after_its_retries_sync_and_async():
    # No connection at all: the stream's own retries, then HostUnavailable (not httpx's ConnectError).
    handler, seen = _stream_answers([httpx.ConnectError] * 3)
    with pytest.raises(HostUnavailable, match=r"^h: does not answer \(ConnectError\)$"):
        list(_process(host_with(handler)).output())
    assert len(seen) == 3
    # A connection lost while the output is read: read on from the last position; a host that then does not
    # answer at all is HostUnavailable after the retries.
    handler, seen = _stream_answers(list(BROKEN))
    events = []
    with pytest.raises(HostUnavailable, match=r"^h: does not answer \(ConnectError\)$") as caught:
        for event in _process(host_with(handler)).output():
            events.append(event.text)
    assert (events, seen, caught.value.body) == (["a\n"] * 2, ["0", "2", "2", "2", "2"], {"host": "h"})

    async def follow(answers: list) -> tuple[list[str], list[str], HostUnavailable]:
        handler, seen = _stream_answers(answers)
        host = AsyncHostClient(HostEndpoint("h", "http://h.test", TOKEN), retry=FAST, http_factory=lambda e, t, h:
                               httpx.AsyncClient(base_url=e.url, transport=httpx.MockTransport(handler)))
        texts = []
        try:
            async for event in _process(host).output():
                texts.append(event.text)
        except HostUnavailable as error:
            return texts, seen, error
        raise AssertionError("no HostUnavailable")

    texts, seen, error = asyncio.run(follow([httpx.ConnectError] * 3))
    assert (texts, seen, str(error)) == ([], ["0", "0", "0"], "h: does not answer (ConnectError)")
    texts, seen, error = asyncio.run(follow(list(BROKEN)))
    assert (texts, seen, str(error)) == (["a\n"] * 2, ["0", "2", "2", "2", "2"], "h: does not answer (ConnectError)")


class _AnswerLost(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """Sends every request to the served runtime; the first claim's answer is lost on the way back (the runtime
    bound the sandbox, the client never hears of it)."""

    def __init__(self):
        self.real, self.areal = httpx.HTTPTransport(), httpx.AsyncHTTPTransport()
        self.claims: list[str] = []

    def _lose(self, request: httpx.Request, status: int) -> None:
        if request.method == "POST" and request.url.path == "/v1/sessions":
            self.claims.append(str(status))
            if len(self.claims) == 1:
                raise httpx.ReadError("connection lost", request=request)

    def handle_request(self, request):
        response = self.real.handle_request(request)
        response.read()
        self._lose(request, response.status_code)
        return response

    async def handle_async_request(self, request):
        response = await self.areal.handle_async_request(request)
        await response.aread()
        self._lose(request, response.status_code)
        return response


def test_a_claim_whose_answer_was_lost_is_sent_again_and_gets_the_same_sandbox_sync_and_async(url, env):
    # The session is bound by the first try; the second is answered by session (200, the same sandbox), not failed
    # over to the pool's next host, where the session would hold a second sandbox.
    two = {"hosts": {"local": {"url": url, "token": TOKEN}, "other": {"url": "http://127.0.0.1:9", "token": TOKEN}},
           "pools": {"py": ["local", "other"]}}
    session = next(s for s in (f"lost-{i}" for i in range(100)) if Client.from_outputs(two).hosts_for("py", s)[0]
                   == "local")
    lost = _AnswerLost()
    client = Client.from_outputs(two, retry=FAST, http_factory=lambda e, t, h: httpx.Client(
        base_url=e.url, headers=h, timeout=t, transport=lost))
    sandbox = client.claim("py", session)
    assert lost.claims == ["201", "200"]  # bound once, answered twice
    assert [row.name for row in env.runtime.store.sandboxes() if row.session == hk(session)] == [sandbox.name]

    lost = _AnswerLost()
    async def claim():
        async with AsyncClient.from_outputs(two, retry=FAST, http_factory=lambda e, t, h: httpx.AsyncClient(
                base_url=e.url, headers=h, timeout=t, transport=lost)) as aclient:
            return await aclient.claim("py", session + "-a")
    asandbox = asyncio.run(claim())
    assert lost.claims == ["201", "200"]
    assert [row.name for row in env.runtime.store.sandboxes() if row.session == hk(session + "-a")] == [asandbox.name]
