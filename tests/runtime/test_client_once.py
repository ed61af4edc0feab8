"""The client written once (docs/design/client.md): the sync classes made from the async ones have the same
methods and signatures; the retry rules, counted on a fake transport, are the same on both faces (a POST once
sent is not sent twice unless it is a claim, a connection never made is tried again after a backoff, Retry-After
is waited up to a bound and named past it); the sync face runs in its caller's thread, so several threads share a
client, it starts no thread or event loop, and it works in a thread whose event loop is running (Jupyter)."""

from __future__ import annotations

import asyncio
import inspect
import threading

import httpx
import pytest

from sandstack.client import (
    AsyncClient,
    AsyncHostClient,
    AsyncProcess,
    AsyncSandbox,
    Client,
    HostClient,
    HostEndpoint,
    HostUnavailable,
    NoCapacity,
    Process,
    Retry,
    Sandbox,
    SandstackError,
    Timeout,
    Unavailable,
)
from sandstack.client.terminal import AsyncTerminal, Terminal
from sandstack.client.transport import AsyncIO, SyncIO
from sandstack.client.watch import AsyncWatch, Watch
from tests.runtime.conftest import TOKEN
from tests.runtime.served import serve
from tests.runtime.test_client_async import outputs

PAIRS = [(Client, AsyncClient), (HostClient, AsyncHostClient), (Sandbox, AsyncSandbox), (Process, AsyncProcess),
         (Terminal, AsyncTerminal), (Watch, AsyncWatch)]
SYNC_NAMES = {"__enter__": "__aenter__", "__exit__": "__aexit__", "__iter__": "__aiter__"}


def _public(cls: type) -> dict[str, object]:
    """Every public method of `cls`, inherited ones included, and its context-manager and iterator methods."""
    names = {n for n in dir(cls) if not n.startswith("_")} | {n for n in (*SYNC_NAMES, *SYNC_NAMES.values())
                                                                  if hasattr(cls, n)}
    return {n: inspect.getattr_static(cls, n) for n in names
            if callable(getattr(cls, n)) and not isinstance(inspect.getattr_static(cls, n), property)}


def _shape(member: object) -> tuple:
    function = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
    return type(member).__name__, [(p.name, p.kind, p.default if p.name != "http_factory" else "default")
                                   for p in inspect.signature(function).parameters.values()]


def differences(sync_cls: type, async_cls: type) -> list[str]:
    """What one face has that the other has not, or has with another signature (parameter names, kinds,
    defaults); the sync face's methods must not be coroutines."""
    sync, asynchronous = _public(sync_cls), _public(async_cls)
    found = []
    for name in sorted({SYNC_NAMES.get(n, n) for n in sync} | set(asynchronous)):
        sync_name = next((s for s, a in SYNC_NAMES.items() if a == name), name)
        if sync_name not in sync or name not in asynchronous:
            found.append(f"{name}: only on {async_cls.__name__ if sync_name not in sync else sync_cls.__name__}")
        elif _shape(sync[sync_name]) != _shape(asynchronous[name]):
            found.append(f"{name}: {_shape(sync[sync_name])} != {_shape(asynchronous[name])}")
        elif inspect.iscoroutinefunction(sync[sync_name]) or inspect.isasyncgenfunction(sync[sync_name]):
            found.append(f"{name}: a coroutine on {sync_cls.__name__}")
    return found


@pytest.mark.parametrize("sync_cls, async_cls", PAIRS, ids=[s.__name__ for s, _ in PAIRS])
def test_every_public_method_is_on_both_faces_with_the_same_signature(sync_cls, async_cls):
    assert differences(sync_cls, async_cls) == []
    assert not issubclass(sync_cls, async_cls) and not issubclass(async_cls, sync_cls)
    # Nor does a sync face look async to code that asks (an async context manager, an async iterator).
    assert not any(hasattr(sync_cls, name) for name in ("__aenter__", "__aexit__", "__aiter__", "__anext__"))


def test_the_comparison_finds_a_method_missing_on_one_face_and_another_signature():
    class Async:
        async def kept(self, a, b=1): ...
        async def only_async(self): ...

    class Sync:
        def kept(self, a, b=2): ...
        def only_sync(self): ...
        async def __enter__(self): ...

    assert differences(Sync, Async) == [
        "__aenter__: only on Sync",
        "kept: ('function', [('self', <_ParameterKind.POSITIONAL_OR_KEYWORD: 1>, <class 'inspect._empty'>), "
        "('a', <_ParameterKind.POSITIONAL_OR_KEYWORD: 1>, <class 'inspect._empty'>), "
        "('b', <_ParameterKind.POSITIONAL_OR_KEYWORD: 1>, 2)]) != ('function', [('self', "
        "<_ParameterKind.POSITIONAL_OR_KEYWORD: 1>, <class 'inspect._empty'>), ('a', "
        "<_ParameterKind.POSITIONAL_OR_KEYWORD: 1>, <class 'inspect._empty'>), ('b', "
        "<_ParameterKind.POSITIONAL_OR_KEYWORD: 1>, 1)])",
        "only_async: only on Async", "only_sync: only on Sync"]


# --- The retry rules, on both faces, counted on a fake transport --------------------------------------------------

@pytest.fixture
def url(env):
    with serve(env.api.app) as base:
        yield base


FAST = Retry(attempts=3, backoff=0.5, max_backoff=2.0)
CLAIMED = {"sandbox": "sb", "pool": "py", "host": "h", "session": "s", "status": "bound"}


@pytest.fixture
def slept(monkeypatch) -> list[float]:
    """The pauses between tries, recorded instead of waited (both ports)."""
    pauses: list[float] = []

    async def sleep(self, seconds: float) -> None:
        pauses.append(seconds)
    monkeypatch.setattr(SyncIO, "sleep", sleep)
    monkeypatch.setattr(AsyncIO, "sleep", sleep)
    return pauses


def call(face: str, answers: list, method: str, *args, retry: Retry = FAST, **kwargs):
    """HostClient.`method` (or AsyncHostClient's, run) over a transport answering each request with the next of
    `answers` (an exception class raised, or (status, body, headers)); (result or the error raised, requests)."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        answer = answers.pop(0)
        if isinstance(answer, type):
            raise answer("lost", request=request)
        status, body, headers = answer
        return httpx.Response(status, json=body, headers=headers)

    transport = httpx.MockTransport(handler)
    endpoint = HostEndpoint("h", "http://h.test", TOKEN)
    try:
        if face == "sync":
            host = HostClient(endpoint, retry=retry, http_factory=lambda e, t, h: httpx.Client(
                base_url=e.url, transport=transport))
            return getattr(host, method)(*args, **kwargs), seen
        host = AsyncHostClient(endpoint, retry=retry, http_factory=lambda e, t, h: httpx.AsyncClient(
            base_url=e.url, transport=transport))
        return asyncio.run(getattr(host, method)(*args, **kwargs)), seen
    except SandstackError as error:
        return error, seen


FACES = pytest.mark.parametrize("face", ["sync", "async"])
EXEC = "POST /v1/sandboxes/sb/exec"
CLAIM = "POST /v1/sessions"


@FACES
def test_a_post_sent_is_not_sent_again_unless_it_is_a_claim(face, slept):
    error, seen = call(face, [httpx.ReadError, (200, {}, {})], "exec", "sb", command=["true"])
    assert (type(error), str(error), seen, slept) == (HostUnavailable, "h: does not answer (ReadError)", [EXEC], [])
    error, seen = call(face, [httpx.WriteError, (200, {}, {})], "exec", "sb", command=["true"])
    assert (type(error), seen) == (HostUnavailable, [EXEC])
    # A claim is answered by session: its answer lost, it is sent again and gets the same sandbox.
    claimed, seen = call(face, [httpx.ReadError, (200, CLAIMED, {})], "claim", "py", "s")
    assert (claimed, seen, len(slept)) == (CLAIMED, [CLAIM, CLAIM], 1)


@FACES
def test_a_connection_never_made_is_tried_again_after_a_growing_backoff_then_raised(face, slept):
    result, seen = call(face, [httpx.ConnectError, httpx.ConnectTimeout, (200, {"exit_code": 0}, {})], "exec", "sb",
                        command=["true"])
    assert (result, seen) == ({"exit_code": 0}, [EXEC] * 3)
    assert 0.25 <= slept[0] <= 0.5 and 0.5 <= slept[1] <= 1.0  # backoff 0.5 s, doubled, with jitter of 50-100 %
    slept.clear()
    error, seen = call(face, [httpx.ConnectError] * 3, "exec", "sb", command=["true"])
    assert (str(error), seen, len(slept)) == ("h: does not answer (ConnectError)", [EXEC] * 3, 2)


DOWN = {"error": "the Docker daemon of host 'h' does not answer"}


@FACES
def test_retry_after_in_seconds_or_as_a_date_is_waited_instead_of_the_backoff(face, slept):
    result, seen = call(face, [(503, DOWN, {"Retry-After": "7"}), (200, [], {})], "pools")
    assert (result, seen, slept) == ([], ["GET /v1/pools"] * 2, [7.0])
    slept.clear()
    past = {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}  # a date gone by: at once
    result, seen = call(face, [(503, DOWN, past), (200, [], {})], "pools")
    assert (result, len(seen), slept) == ([], 2, [0.0])
    slept.clear()
    # A 429 is tried again when it says when; without a Retry-After it is the caller's.
    result, seen = call(face, [(429, {"error": "slow down"}, {"Retry-After": "2"}), (200, CLAIMED, {})], "claim",
                        "py", "s")
    assert (result, seen, slept) == (CLAIMED, [CLAIM] * 2, [2.0])
    error, seen = call(face, [(429, {"error": "slow down"}, {})], "claim", "py", "s")
    assert (error.status, error.message, seen) == (429, "slow down", [CLAIM])
    # No capacity is never waited for, whatever it says: the claim fails over to the pool's next host at once.
    error, seen = call(face, [(503, {"error": "no capacity: every sandbox is in use"}, {"Retry-After": "1"})],
                       "claim", "py", "s")
    assert (type(error), seen) == (NoCapacity, [CLAIM])


@FACES
def test_a_retry_after_past_the_bound_is_raised_at_once_naming_it(face, slept):
    error, seen = call(face, [(503, DOWN, {"Retry-After": "31"})], "pools")
    assert (type(error), str(error), error.body, seen, slept) == (
        Unavailable, "h: the Docker daemon of host 'h' does not answer (Retry-After: 31: 31 s, more than the 30 s "
                     "this client waits)", {**DOWN, "retry_after": 31.0}, ["GET /v1/pools"], [])
    error, seen = call(face, [(503, DOWN, {"Retry-After": "Fri, 01 Jan 2100 00:00:00 GMT"})], "pools")
    assert str(error).startswith("h: the Docker daemon of host 'h' does not answer (Retry-After: Fri, 01 Jan 2100 "
                                 "00:00:00 GMT: ") and str(error).endswith(" s, more than the 30 s this client waits)")
    # The bound is the Retry's own.
    result, seen = call(face, [(503, DOWN, {"Retry-After": "31"}), (200, [], {})], "pools",
                        retry=Retry(max_retry_after=60))
    assert (result, slept) == ([], [31.0])


def test_a_sync_face_given_an_async_httpx_client_says_so():
    def factory(endpoint, timeout, headers):
        return httpx.AsyncClient(base_url=endpoint.url)
    message = (r"^http_factory made an httpx.AsyncClient for host 'h': the sync client takes an httpx.Client \(an "
               r"httpx.AsyncClient is for AsyncClient, AsyncHostClient\)$")
    with pytest.raises(TypeError, match=message):
        HostClient(HostEndpoint("h", "http://h.test", TOKEN), http_factory=factory)
    with pytest.raises(TypeError, match=message.replace("'h'", "'a'")):
        Client.from_outputs({"hosts": {"a": {"url": "http://a.test", "token": TOKEN}}, "pools": {}},
                            http_factory=factory)


# --- The sync face in threads and in a running event loop's thread --------------------------------------------------

def _session(client, name: str) -> tuple[str, str, bytes, str]:
    with client.claim("py", name) as sandbox:
        ran = sandbox.exec(["sh", "-c", f"echo {name}"]).stdout
        sandbox.write_file(f"{name}.txt", name)
        streamed = "".join(event.text for event in sandbox.start(["echo", name]))
        return sandbox.session, ran, sandbox.read_file(f"{name}.txt"), streamed


def test_one_sync_client_serves_several_threads_and_starts_no_thread_or_event_loop(url, monkeypatch):
    loops: list[object] = []
    new_loop = asyncio.events.new_event_loop
    monkeypatch.setattr(asyncio.events, "new_event_loop", lambda: loops.append(1) or new_loop())
    started: list[tuple[threading.Thread, threading.Thread]] = []  # (starter, started): the served runtime's own
    start = threading.Thread.start  # threads (its AnyIO workers) are started by its server's thread, not ours
    monkeypatch.setattr(threading.Thread, "start", lambda self: started.append((threading.current_thread(), self))
                        or start(self))
    results: dict[str, object] = {}
    with Client.from_outputs(outputs(url)) as client:
        def work(name: str) -> None:
            try:
                results[name] = _session(client, name)
            except BaseException as error:  # reported below, with the thread's name
                results[name] = error
        threads = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert results == {f"t{i}": (f"t{i}", f"t{i}\n", f"t{i}".encode(), f"t{i}\n") for i in range(4)}
    ours = {threading.main_thread(), *threads}
    assert [new for starter, new in started if starter in ours and new not in threads] == [] and loops == []


def test_the_sync_client_works_in_a_thread_whose_event_loop_is_running(url):
    async def notebook_cell():  # a Jupyter cell: the sync client called inside the kernel's running loop
        asyncio.get_running_loop()
        with Client.from_outputs(outputs(url)) as client:
            return _session(client, "cell")
    assert asyncio.run(notebook_cell()) == ("cell", "cell\n", b"cell", "cell\n")


def test_a_sync_terminal_read_that_times_out_raises_timeout(url):
    with Client.from_outputs(outputs(url)) as client:
        with client.claim("py", "term-quiet").terminal(command=["sh", "-i"]) as term:
            with pytest.raises(Timeout) as waited:
                term.read_until("never-printed", timeout=0.5)
    assert (waited.value.status, str(waited.value)) == (504, "local: b'never-printed' did not appear within 0.5s")


def test_a_dropped_sync_handle_is_freed_at_once_and_reads_as_its_sync_class():
    import weakref

    from sandstack.client import ProcessInfo

    answer = {"sandbox": "sb", "pool": "py", "host": "h", "session": "s", "status": "bound"}
    host = HostClient(HostEndpoint("h", "http://h.test", TOKEN), http_factory=lambda e, t, h: httpx.Client(
        base_url=e.url, transport=httpx.MockTransport(lambda request: httpx.Response(200, json=answer))))
    sandbox = Sandbox(host, answer)
    process = Process(sandbox, ProcessInfo.of({"id": "p1", "sandbox": "sb", "session": "s", "status": "running"}))
    assert (repr(sandbox), repr(process), process.sandbox is sandbox, sandbox.host is host) == (
        "<Sandbox h/sb session='s'>", "Process('p1', 'running')", True, True)
    assert not any(hasattr(o, name) for o in (sandbox, process) for name in ("__aenter__", "__aiter__"))
    held = [weakref.ref(o) for o in (host, host._core, sandbox, sandbox._core, process, process._core)]
    del host, sandbox, process
    assert [ref() for ref in held] == [None] * 6  # no cycle between a sync handle and what it holds


def test_a_coroutine_that_would_wait_on_an_event_loop_is_stopped_and_reported_not_left_half_run():
    from sandstack.client.blocking import run

    steps: list[str] = []

    async def waits_on_a_loop():
        steps.append("began")
        try:
            await asyncio.sleep(0)  # what the client's code must never await: only its port
            steps.append("went on")
        finally:
            steps.append("closed")
    with pytest.raises(RuntimeError, match=r"^a sync client's call waited on an event loop"):
        run(waits_on_a_loop())
    assert steps == ["began", "closed"]


@FACES
def test_a_streamed_answer_is_tried_again_by_the_same_rules(face, slept):
    answers = [httpx.ConnectError, (503, DOWN, {"Retry-After": "3"}), b"the file"]
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.method)
        answer = answers.pop(0)
        if isinstance(answer, type):
            raise answer("lost", request=request)
        if isinstance(answer, bytes):
            return httpx.Response(200, content=answer, headers={"content-type": "application/octet-stream"})
        return httpx.Response(answer[0], json=answer[1], headers=answer[2])

    endpoint, transport = HostEndpoint("h", "http://h.test", TOKEN), httpx.MockTransport(handler)
    if face == "sync":
        host = HostClient(endpoint, retry=FAST, http_factory=lambda e, t, h: httpx.Client(base_url=e.url,
                                                                                           transport=transport))
        with host.open_file("sb", "f.bin") as response:
            body = response.read()
    else:
        async def read() -> bytes:
            host = AsyncHostClient(endpoint, retry=FAST, http_factory=lambda e, t, h: httpx.AsyncClient(
                base_url=e.url, transport=transport))
            async with host.open_file("sb", "f.bin") as response:
                return await response.aread()
        body = asyncio.run(read())
    assert (body, seen, len(slept), slept[1]) == (b"the file", ["GET"] * 3, 2, 3.0)


def test_a_claim_reads_each_lately_down_host_once_so_another_thread_may_drop_it_meanwhile():
    class Dropped(dict):
        """A host seen in `down`, then gone from it (another thread's claim reached it) at the next read."""

        def __contains__(self, key: object) -> bool:
            return True

        def __getitem__(self, key: str) -> float:
            raise KeyError(key)

    client = Client.from_outputs(
        {"hosts": {"a": {"url": "http://a.test", "token": TOKEN}}, "pools": {"py": ["a"]}},
        http_factory=lambda e, t, h: httpx.Client(base_url=e.url, transport=httpx.MockTransport(
            lambda request: httpx.Response(201, json=CLAIMED))))
    client.down = Dropped()
    assert client.claim("py", "s").name == "sb"
