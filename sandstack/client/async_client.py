"""The async twin of sandstack.client.client: AsyncClient, AsyncHostClient, AsyncSandbox and AsyncProcess have the
same methods, arguments and results as Client, HostClient, Sandbox and Process, awaited (`async with`,
`async for`). What is not I/O (the endpoints and what is made of their answers: sandstack.client.endpoints; errors,
results, retries, the failover order) is shared with the sync client."""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Mapping, Sequence

import httpx

from sandstack.client.client import (
    ACTOR_HEADER,
    CREATING_POLL,
    HostEndpoint,
    SnapshotRef,
    _snapshot_ref,
    answer_error,
    hosts_in_order,
)
from sandstack.client.endpoints import (
    Call,
    Endpoints,
    Handle,
    Stack,
    dir_entries,
    exec_result,
    file_content,
    refuse_directory,
    session_endpoint,
)
from sandstack.client.errors import Conflict, HostUnavailable, NoCapacity, SandstackError, host_lost
from sandstack.client.pieces import PIECE
from sandstack.client.process import STDIN_WAIT, _timed_out, _waits, broke, held, stdin_retries
from sandstack.client.results import ExecResult, FileEntry, NetworkProfile, OutputEvent, ProcessInfo, SandboxInfo
from sandstack.client.retry import Retry
from sandstack.client.sse import aevents
from sandstack.client.transfer import AsyncFileBody, Destination, Progress, Sink, Source, open_source

AsyncHttpFactory = Callable[[HostEndpoint, float, dict[str, str]], httpx.AsyncClient]


def _default_http(endpoint: HostEndpoint, timeout: float, headers: dict[str, str]) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=endpoint.url, headers=headers, timeout=timeout)


class AsyncHostClient(Endpoints):
    """HostClient's twin: the same endpoints (sandstack.client.endpoints), each awaited."""

    def __init__(self, endpoint: HostEndpoint, *, timeout: float = 120, actor: str | None = None,
                 http_factory: AsyncHttpFactory = _default_http, retry: Retry = Retry()):
        self.endpoint, self.name, self.retry = endpoint, endpoint.name, retry
        headers = {"Authorization": f"Bearer {endpoint.token}"}
        if actor:
            headers[ACTOR_HEADER] = actor
        self.http = http_factory(endpoint, timeout, headers)

    async def request(self, method: str, path: str, *, expect: str = "json", idempotent: bool = False,
                 **kwargs: Any) -> Any:
        reached = False  # an earlier try was sent (its answer lost)
        for attempt in range(1, self.retry.attempts + 1):
            last = attempt == self.retry.attempts
            try:
                response = await self.http.request(method, path, **kwargs)
            except httpx.TransportError as error:
                if last or not self.retry.on_error(method, error, idempotent):
                    raise host_lost(self.name, error) from error
                reached = reached or self.retry.reached(error)
                await asyncio.sleep(self.retry.delay(attempt))
                continue
            if response.status_code < 400:
                break
            error = answer_error(response, self.name)
            if self.retry.gone_already(method, error.status, reached):
                return None
            if last or not self.retry.on_status(error.status, error.message):
                raise error
            await asyncio.sleep(self.retry.delay(attempt))
        if expect == "bytes":
            return response.content
        if expect == "response":
            return response
        return response.json() if response.content else None

    @asynccontextmanager
    async def stream(self, method: str, path: str, **kwargs: Any) -> AsyncIterator[httpx.Response]:
        for attempt in range(1, self.retry.attempts + 1):
            reading = False
            try:
                async with self.http.stream(method, path, **kwargs) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        error = answer_error(response, self.name)
                        if attempt < self.retry.attempts and self.retry.on_status(error.status, error.message):
                            await asyncio.sleep(self.retry.delay(attempt))
                            continue
                        raise error
                    reading = True
                    yield response
                    return
            except httpx.TransportError as error:
                if reading or attempt == self.retry.attempts or not self.retry.on_error(method, error):
                    raise host_lost(self.name, error) from error
                await asyncio.sleep(self.retry.delay(attempt))

    def _send(self, call: Call) -> Any:  # an awaitable: `await host.status(...)`
        return self.request(call.method, call.path, expect=call.expect, idempotent=call.idempotent, **call.options)

    def _open(self, call: Call) -> Any:
        return self.stream(call.method, call.path, **call.options)

    async def close(self) -> None:
        await self.http.aclose()


class AsyncSandbox(Handle):
    host: AsyncHostClient

    @classmethod
    async def connect(cls, url: str, session: str, token: str, *, host: str = "runtime", timeout: float = 120,
                      actor: str | None = None, http_factory: AsyncHttpFactory = _default_http,
                      retry: Retry = Retry()) -> AsyncSandbox:
        """Sandbox.connect's twin."""
        client = AsyncHostClient(session_endpoint(url, token, host), timeout=timeout, actor=actor,
                                 http_factory=http_factory, retry=retry)
        sandbox = cls(client, {**await client.get_session(session), "token": token})
        sandbox.connected = True
        return sandbox

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.connected:  # as Sandbox's
            await self.host.close()
        else:
            await self.release()

    async def exec(self, command: list[str] | None = None, *, script: str | None = None, lang: str = "bash",
                   cwd: str | None = None, env: Mapping[str, str] | None = None, timeout: int | None = None,
                   check: bool = False) -> ExecResult:
        answer = await self.host.exec(self.name, command=command, script=script, lang=lang, cwd=cwd,
                                      env=dict(env or {}), timeout=timeout)
        return exec_result(answer, check, self.host.name)

    async def start(self, command: list[str] | None = None, *, script: str | None = None, lang: str = "bash",
                    cwd: str | None = None, env: Mapping[str, str] | None = None, timeout: int | None = None,
                    stdin: bool = False, output_limit: int | None = None) -> AsyncProcess:
        info = await self.host.start_process(self.name, command=command, script=script, lang=lang, cwd=cwd,
                                             env=dict(env or {}), timeout=timeout, stdin=stdin,
                                             output_limit=output_limit)
        return AsyncProcess(self, ProcessInfo.of(info))

    async def process(self, process_id: str) -> AsyncProcess:
        return AsyncProcess(self, ProcessInfo.of(await self.host.process(self.name, process_id)))

    async def processes(self) -> list[ProcessInfo]:
        return [ProcessInfo.of(p) for p in await self.host.processes(self.name)]

    async def watch(self, path: str = "", interval: float = 0.5):
        from sandstack.client.watch import AsyncWatch

        return await AsyncWatch(AsyncProcess(self, ProcessInfo.of(await self.host.watch(self.name, path,
                                                                                        interval)))).ready()

    def terminal(self, rows: int = 24, cols: int = 80, command: list[str] | None = None, mode: str = "raw"):
        """An async context manager: a terminal (sandstack.client.terminal.AsyncTerminal); `mode` as the sync one's."""
        from sandstack.client.terminal import aopen_terminal

        return aopen_terminal(self.host, self.name, rows, cols, command, mode)

    async def read_file(self, path: str) -> bytes:
        return file_content(await self.host.read_file(self.name, path), path, self.host.name)

    async def list_dir(self, path: str = "") -> list[FileEntry]:
        return dir_entries(await self.host.read_file(self.name, path), path, self.host.name)

    async def write_file(self, path: str, data: bytes | str) -> None:
        await self.host.write_file(self.name, path, data.encode() if isinstance(data, str) else data)

    async def upload(self, path: str, source: Source, progress: Progress | None = None) -> None:
        file, label, ours = await asyncio.to_thread(open_source, source)
        try:
            await self.host.upload_file(self.name, path, AsyncFileBody(file, label, self.host.name, progress))
        finally:
            if ours:
                await asyncio.to_thread(file.close)

    async def download(self, path: str, dest: Destination, progress: Progress | None = None) -> int:
        sink = await asyncio.to_thread(Sink, dest, progress)
        try:
            async with self.host.open_file(self.name, path) as response:
                refuse_directory(response, path, self.host.name)
                sink.announced(response.headers.get("content-length"))
                held: list[bytes] = []  # written a PIECE at a time: one hop to a thread per MiB, not per read
                size = 0
                async for chunk in response.aiter_bytes():
                    held.append(chunk)
                    size += len(chunk)
                    if size >= PIECE:
                        await asyncio.to_thread(sink.write, b"".join(held))
                        sink.report()
                        held, size = [], 0
                if held:
                    await asyncio.to_thread(sink.write, b"".join(held))
                    sink.report()
                return await asyncio.to_thread(sink.done, path, self.host.name)
        except BaseException:
            await asyncio.to_thread(sink.abort)
            raise

    async def delete_file(self, path: str) -> None:
        await self.host.delete_file(self.name, path)

    async def archive(self, fmt: str = "tar.gz") -> bytes:
        return await self.host.archive(self.name, fmt)

    async def snapshot(self) -> SnapshotRef:
        info = await self.host.snapshot(self.name)
        return SnapshotRef(self.host.name, info["id"], info)

    async def restore(self, snapshot: SnapshotRef | str) -> dict[str, Any]:
        return await self.host.restore(self.name, snapshot.id if isinstance(snapshot, SnapshotRef) else snapshot)

    async def pause(self) -> SandboxInfo:
        return SandboxInfo.of(await self.host.pause(self.name))

    async def resume(self) -> SandboxInfo:
        """Back from a pause or a hibernation (by the session: the runtime knows which)."""
        return SandboxInfo.of(await self.host.resume_session(self.session))

    async def network(self, profile: str | None = None) -> NetworkProfile:
        """The session's network profile; with `profile`, switched to it first (one its template declares: else
        SandstackError with the runtime's 422 naming them), in place: the gateway applies it from the next request."""
        if profile is None:
            return NetworkProfile.of(await self.host.network(self.session))
        return NetworkProfile.of(await self.host.switch_network(self.session, profile))

    async def hibernate(self) -> SandboxInfo:
        """Stop it and keep its files (memory and CPU freed); any later call resumes it."""
        return SandboxInfo.of(await self.host.hibernate(self.session))

    async def status(self) -> SandboxInfo:
        return SandboxInfo.of(await self.host.status(self.name))

    async def release(self) -> SandboxInfo:
        answer = await self.host.release(self.session)
        # None: an earlier try was done and its answer lost (sandstack.client.retry); the sandbox as it is now.
        return SandboxInfo.of(answer) if answer is not None else await self.status()


class AsyncProcess:
    def __init__(self, sandbox: AsyncSandbox, info: ProcessInfo):
        self.sandbox, self.info, self.id = sandbox, info, info.id
        self._host = sandbox.host

    async def refresh(self) -> ProcessInfo:
        self.info = ProcessInfo.of(await self._host.process(self.sandbox.name, self.id))
        return self.info

    async def wait(self, timeout: float | None = None) -> ProcessInfo:
        for chunk in _waits(timeout):
            self.info = ProcessInfo.of(await self._host.wait_process(self.sandbox.name, self.id, chunk))
            if not self.info.running:
                return self.info
        raise _timed_out(self.info, timeout, self._host.name)

    async def kill(self) -> ProcessInfo:
        self.info = ProcessInfo.of(await self._host.kill_process(self.sandbox.name, self.id))
        return self.info

    async def write_stdin(self, data: bytes | str, timeout: float = STDIN_WAIT) -> None:
        """As Process.write_stdin: taken at once by the runtime; waits while it holds an earlier write."""
        await self._stdin(data.encode() if isinstance(data, str) else data, False, timeout)

    async def close_stdin(self, timeout: float = STDIN_WAIT) -> None:
        await self._stdin(b"", True, timeout)

    async def _stdin(self, data: bytes, close: bool, timeout: float) -> None:
        pauses = stdin_retries(timeout)
        while True:
            try:
                self.info = ProcessInfo.of(await self._host.write_stdin(self.sandbox.name, self.id, data,
                                                                        close=close))
                return
            except Conflict as error:
                pause = next(pauses, None) if held(error) else None
                if pause is None:
                    raise
            await asyncio.sleep(pause)

    async def output(self, after: int = 0, follow: bool = True) -> AsyncIterator[OutputEvent]:
        failures = 0
        while True:
            try:
                async with self._host.process_output(self.sandbox.name, self.id, after, follow) as response:
                    async for event in aevents(response.aiter_lines()):
                        failures = 0
                        if event.kind == "exit":
                            self.info = ProcessInfo.of(event.data)
                            return
                        if event.position is not None:
                            after = event.position
                        yield event
                return
            except HostUnavailable as error:
                failures += 1
                if not broke(error) or failures >= self._host.retry.attempts:
                    raise
                await asyncio.sleep(self._host.retry.delay(failures))

    def __aiter__(self) -> AsyncIterator[OutputEvent]:
        return self.output()


class AsyncClient(Stack):
    def __init__(self, hosts: Mapping[str, HostEndpoint], pools: Mapping[str, list[str]], *, timeout: float = 120,
                 actor: str | None = None, http_factory: AsyncHttpFactory = _default_http, retry: Retry = Retry()):
        unknown = sorted({h for names in pools.values() for h in names} - set(hosts))
        if unknown:
            raise ValueError(f"pools name hosts without a runtime endpoint: {', '.join(unknown)}")
        self.pools = {pool: list(names) for pool, names in pools.items()}
        self.timeout = timeout
        self.hosts = {name: AsyncHostClient(endpoint, timeout=timeout, actor=actor, http_factory=http_factory,
                                            retry=retry) for name, endpoint in hosts.items()}

    def hosts_for(self, pool: str, session: str) -> list[str]:
        return hosts_in_order(self.pools, pool, session)

    async def claim(self, pool: str, session: str, from_snapshot: SnapshotRef | str | None = None,
                    secrets: Mapping[str, Mapping[str, str]] | None = None, size: str | None = None,
                    ssh_keys: Sequence[str] | None = None) -> AsyncSandbox:
        """Client.claim's twin: `size` names a size class of the pool (None: its own limits); `ssh_keys` the
        session's SSH login keys."""
        if from_snapshot is not None:
            ref = from_snapshot if isinstance(from_snapshot, SnapshotRef) else _snapshot_ref(str(from_snapshot))
            host = self.host(ref.host)
            return AsyncSandbox(host, await host.claim(pool, session, ref.id, secrets, size, ssh_keys))
        refused: list[str] = []
        last: SandstackError | None = None
        for name in self.hosts_for(pool, session):
            host = self.hosts[name]
            try:
                return AsyncSandbox(host, await self._ready(host, await host.claim(pool, session, secrets=secrets,
                                                                                   size=size, ssh_keys=ssh_keys)))
            except httpx.TransportError as error:
                refused.append(f"{name}: does not answer ({type(error).__name__})")
            except SandstackError as error:
                if error.status != 503:
                    raise
                refused.append(f"{name}: {error.message}")
                last = error
        kind = NoCapacity if isinstance(last, NoCapacity) else HostUnavailable
        raise kind(503, f"no host of pool {pool!r} could take session {session!r}: " + "; ".join(refused),
                   {"pool": pool, "hosts": refused})

    async def _ready(self, host: AsyncHostClient, info: dict[str, Any]) -> dict[str, Any]:
        """Client._ready's twin: a session another claim is creating on demand is waited for."""
        deadline = time.monotonic() + self.timeout
        token = {k: info[k] for k in ("token", "token_expires_at") if k in info}
        while info.get("status") == "creating" and time.monotonic() < deadline:
            await asyncio.sleep(CREATING_POLL)
            info = {**await host.get_session(info["session"]), **token}
        return info

    async def sandbox(self, ref: str) -> AsyncSandbox:
        host_name, name = self.sandbox_ref(ref)
        host = self.host(host_name)
        return AsyncSandbox(host, await host.status(name))

    async def close(self) -> None:
        for host in self.hosts.values():
            await host.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
