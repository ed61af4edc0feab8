"""The client, written once: AsyncClient (every host of a stack), AsyncHostClient (one host's runtime, every
endpoint) and AsyncSandbox (a claimed sandbox's handle), awaited (`async with`, `async for`). The sync client
(sandstack.client.client) is these same classes over a sync httpx.Client, run by sandstack.client.blocking: what
differs between the two is only how a request is sent and how the code waits (sandstack.client.transport)."""

from __future__ import annotations

import hashlib
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Mapping, Sequence

import httpx

from sandstack.client.endpoints import (
    Call,
    Endpoints,
    Handle,
    HostEndpoint,
    Stack,
    dir_entries,
    exec_result,
    file_content,
    refuse_directory,
    session_endpoint,
)
from sandstack.client.errors import HostUnavailable, NoCapacity, NotFound, SandstackError, error_for, host_lost
from sandstack.client.process import AsyncProcess
from sandstack.client.results import ExecResult, FileEntry, NetworkProfile, ProcessInfo, SandboxInfo
from sandstack.client.retry import Retry, retry_after
from sandstack.client.transfer import Destination, Progress, Sink, Source, open_source
from sandstack.client.transport import POOL, port_for

ACTOR_HEADER = "X-Sandstack-Actor"
CREATING_POLL = 0.1  # seconds between looks at a session another claim is creating on demand
DOWN_FOR = 30.0  # seconds a host that did not answer is tried last by claims


@dataclass(frozen=True)
class SnapshotRef:
    """A snapshot is stored on the host of the sandbox it was taken from; branching happens there."""

    host: str
    id: str
    info: Mapping[str, Any]

    def __str__(self) -> str:
        return f"{self.host}/{self.id}"


HttpFactory = Callable[[HostEndpoint, float, dict[str, str]], "httpx.Client | httpx.AsyncClient"]


def _default_http(endpoint: HostEndpoint, timeout: float, headers: dict[str, str]) -> httpx.AsyncClient:
    # The async pool is the same code as the sync one (its tasks race as threads do): the same limits.
    return httpx.AsyncClient(base_url=endpoint.url, headers=headers, timeout=timeout, limits=POOL)


class AsyncHostClient(Endpoints):
    """One host's runtime: a method per endpoint (sandstack.client.endpoints), JSON in and out; errors raise
    SandstackError. `http_factory` makes its httpx client (an httpx.Client for the sync HostClient)."""

    def __init__(self, endpoint: HostEndpoint, *, timeout: float = 120, actor: str | None = None,
                 http_factory: HttpFactory = _default_http, retry: Retry = Retry()):
        self.endpoint, self.name, self.retry = endpoint, endpoint.name, retry
        headers = {"Authorization": f"Bearer {endpoint.token}"}
        if actor:
            headers[ACTOR_HEADER] = actor
        self.http = http_factory(endpoint, timeout, headers)
        self.io = port_for(self.http)

    async def request(self, method: str, path: str, *, expect: str = "json", idempotent: bool = False,
                      **kwargs: Any) -> Any:
        async with self._answer(method, path, idempotent, False, kwargs) as response:
            if response is None:  # a DELETE an earlier try did (sandstack.client.retry)
                return None
            if expect == "bytes":
                return response.content
            if expect == "response":
                return response
            return response.json() if response.content else None

    def stream(self, method: str, path: str, **kwargs: Any) -> Any:
        """A context manager of the response read as it comes (retried like `request` until its head arrives); a
        connection that fails after the retries, or breaks while the body is read, raises HostUnavailable like
        every other call."""
        return self._answer(method, path, False, True, kwargs)

    @asynccontextmanager
    async def _answer(self, method: str, path: str, idempotent: bool, streaming: bool,
                      kwargs: dict[str, Any]) -> AsyncIterator[httpx.Response | None]:
        """The one try-again loop of every call (sandstack.client.retry says when)."""
        reached = False  # an earlier try was sent (its answer lost)
        for attempt in range(1, self.retry.attempts + 1):
            last, reading = attempt == self.retry.attempts, False
            try:
                async with self.io.send(method, path, streaming, **kwargs) as response:
                    if response.status_code < 400:
                        reading = True
                        yield response
                        return
                    await self.io.read(response)
                    error = answer_error(response, self.name)
                    if self.retry.gone_already(method, error.status, reached):
                        reading = True
                        yield None
                        return
                    pause = self._pause(error, response.headers.get("retry-after"), attempt, last)
            except httpx.TransportError as error:
                if reading or last or not self.retry.on_error(method, error, idempotent):
                    raise host_lost(self.name, error) from error
                reached = reached or self.retry.reached(error)
                pause = self.retry.delay(attempt)
            await self.io.sleep(pause)

    def _pause(self, error: SandstackError, header: str | None, attempt: int, last: bool) -> float:
        """Seconds before the next try after an error answer, or the error raised: not one to try again, the
        last try, or a Retry-After longer than the client waits (named, with the bound)."""
        wait = retry_after(header)
        if not self.retry.on_status(error.status, error.message, wait):
            raise error
        if wait is not None and wait > self.retry.max_retry_after:
            raise error_for(error.status, f"{error.message} (Retry-After: {header}: {wait:g} s, more than the "
                                          f"{self.retry.max_retry_after:g} s this client waits)",
                            {**error.body, "retry_after": wait}, self.name)
        if last:
            raise error
        return self.retry.delay(attempt) if wait is None else wait

    def _send(self, call: Call) -> Any:  # an awaitable: `await host.status(...)`
        return self.request(call.method, call.path, expect=call.expect, idempotent=call.idempotent, **call.options)

    def _open(self, call: Call) -> Any:
        return self.stream(call.method, call.path, **call.options)

    async def close(self) -> None:
        await self.io.close()


class AsyncSandbox(Handle):
    """A claimed sandbox: every call goes to the host that holds it. As a context manager, it is released at the
    end of the block."""

    host: AsyncHostClient

    @classmethod
    async def connect(cls, url: str, session: str, token: str, *, host: str = "runtime", timeout: float = 120,
                      actor: str | None = None, http_factory: HttpFactory = _default_http,
                      retry: Retry = Retry()) -> Any:
        """The handle of session `session`'s sandbox from its runtime's URL and the session's token alone (a claim's
        `sandbox.url`, `.session`, `.token`): it acts on that sandbox only; the pool's operations (claim, release,
        listings) answer Forbidden. `host` names the runtime in errors."""
        client = AsyncHostClient(session_endpoint(url, token, host), timeout=timeout, actor=actor,
                                 http_factory=http_factory, retry=retry)
        sandbox = cls(client, {**await client.get_session(session), "token": token})
        sandbox.connected = True
        return sandbox

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.connected:  # a session's token cannot release its session (the platform's token does): closed
            await self.host.close()
        else:
            await self.release()

    async def exec(self, command: list[str] | None = None, *, script: str | None = None, lang: str = "bash",
                   cwd: str | None = None, env: Mapping[str, str] | None = None, timeout: int | None = None,
                   check: bool = False) -> ExecResult:
        """Runs the command to its end; `check`: raise CommandFailed when it exits non-zero."""
        answer = await self.host.exec(self.name, command=command, script=script, lang=lang, cwd=cwd,
                                      env=dict(env or {}), timeout=timeout)
        return exec_result(answer, check, self.host.name)

    async def start(self, command: list[str] | None = None, *, script: str | None = None, lang: str = "bash",
                    cwd: str | None = None, env: Mapping[str, str] | None = None, timeout: int | None = None,
                    stdin: bool = False, output_limit: int | None = None) -> AsyncProcess:
        """Starts the command and returns at once: a handle to follow its output, write its stdin, wait, kill."""
        info = await self.host.start_process(self.name, command=command, script=script, lang=lang, cwd=cwd,
                                             env=dict(env or {}), timeout=timeout, stdin=stdin,
                                             output_limit=output_limit)
        return AsyncProcess(self, ProcessInfo.of(info))

    async def process(self, process_id: str) -> AsyncProcess:
        return AsyncProcess(self, ProcessInfo.of(await self.host.process(self.name, process_id)))

    async def processes(self) -> list[ProcessInfo]:
        return [ProcessInfo.of(p) for p in await self.host.processes(self.name)]

    async def watch(self, path: str = "", interval: float = 0.5):
        """Change events under a workspace directory (sandstack.client.watch), until stopped; made once the watch
        has taken the directory's first state."""
        from sandstack.client.watch import AsyncWatch

        info = ProcessInfo.of(await self.host.watch(self.name, path, interval))
        return await AsyncWatch(AsyncProcess(self, info)).ready()

    def terminal(self, rows: int = 24, cols: int = 80, command: list[str] | None = None, mode: str = "raw"):
        """A context manager: a terminal (sandstack.client.terminal) running a shell, or `command`;
        `mode="command"`: `run(...)` returns each command's output and exit status apart."""
        from sandstack.client.terminal import open_terminal

        return open_terminal(self.host, self.name, rows, cols, command, mode)

    async def read_file(self, path: str) -> bytes:
        return file_content(await self.host.read_file(self.name, path), path, self.host.name)

    async def list_dir(self, path: str = "") -> list[FileEntry]:
        return dir_entries(await self.host.read_file(self.name, path), path, self.host.name)

    async def write_file(self, path: str, data: bytes | str) -> None:
        await self.host.write_file(self.name, path, data.encode() if isinstance(data, str) else data)

    async def upload(self, path: str, source: Source, progress: Progress | None = None) -> None:
        """A local file (a path, or a binary file object from where it stands) into `path`, streamed: never held
        whole in memory (sandstack.client.transfer); `progress(sent, size)` after each MiB."""
        io = self.host.io
        file, label, ours = await io.call(open_source, source)
        try:
            await self.host.upload_file(self.name, path, io.body(file, label, self.host.name, progress))
        finally:
            if ours:
                await io.call(file.close)

    async def download(self, path: str, dest: Destination, progress: Progress | None = None) -> int:
        """The file at `path` into `dest` (a path: replaced only once all of it came; or a binary file object),
        streamed; its byte count. `progress(received, size)` after each piece written."""
        io = self.host.io
        sink = await io.call(Sink, dest, progress)
        try:
            async with self.host.open_file(self.name, path) as response:
                refuse_directory(response, path, self.host.name)
                sink.announced(response.headers.get("content-length"))
                held: list[bytes] = []
                size = 0
                async for chunk in io.chunks(response):
                    held.append(chunk)
                    size += len(chunk)
                    if size >= io.batch:
                        await io.call(sink.write, held[0] if len(held) == 1 else b"".join(held))
                        sink.report()
                        held, size = [], 0
                if held:
                    await io.call(sink.write, b"".join(held))
                    sink.report()
                return await io.call(sink.done, path, self.host.name)
        except BaseException:
            await io.call(sink.abort)
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


class AsyncClient(Stack):
    """Every host of a stack's runtime; as a context manager, its connections are closed at the end."""

    def __init__(self, hosts: Mapping[str, HostEndpoint], pools: Mapping[str, list[str]], *, timeout: float = 120,
                 actor: str | None = None, http_factory: HttpFactory = _default_http, retry: Retry = Retry()):
        unknown = sorted({h for names in pools.values() for h in names} - set(hosts))
        if unknown:
            raise ValueError(f"pools name hosts without a runtime endpoint: {', '.join(unknown)}")
        self.pools = {pool: list(names) for pool, names in pools.items()}
        self.timeout = timeout
        self.down: dict[str, float] = {}  # host → when it last did not answer (claims try it last for DOWN_FOR s)
        self.hosts = {name: AsyncHostClient(endpoint, timeout=timeout, actor=actor, http_factory=http_factory,
                                            retry=retry) for name, endpoint in hosts.items()}

    def hosts_for(self, pool: str, session: str) -> list[str]:
        """The pool's hosts in the order a claim tries them: rotated by the session id, so the same session
        goes to the same host first (its claim is idempotent there) and sessions spread over the hosts."""
        return hosts_in_order(self.pools, pool, session)

    async def claim(self, pool: str, session: str, from_snapshot: SnapshotRef | str | None = None,
                    secrets: Mapping[str, Mapping[str, str]] | None = None, size: str | None = None,
                    ssh_keys: Sequence[str] | None = None) -> AsyncSandbox:
        """A sandbox of `pool` for `session`; with a snapshot (SnapshotRef or 'host/snap-id'), on its host;
        `secrets`: the session's own (AsyncHostClient.claim); `size`: a size class of the pool (None: its own
        limits); `ssh_keys`: OpenSSH public key lines that log in to the session over SSH (docs/design/ssh.md).
        A class the pool does not declare raises the runtime's 422 at once (no other host is tried)."""
        if from_snapshot is not None:
            ref = from_snapshot if isinstance(from_snapshot, SnapshotRef) else _snapshot_ref(str(from_snapshot))
            return await self._claim_from(pool, session, ref, secrets, size, ssh_keys)
        refused: list[str] = []
        last: SandstackError | None = None
        now = time.monotonic()
        # A host that did not answer lately goes last: after the first detection, a claim costs no timeout.
        # One read of `down` per host: another thread's claim may drop a host from it meanwhile.
        order = sorted(self.hosts_for(pool, session),
                       key=lambda name: now - self.down.get(name, float("-inf")) < DOWN_FOR)
        for name in order:
            host = self.hosts[name]
            try:
                sandbox = AsyncSandbox(host, await self._ready(host, await host.claim(
                    pool, session, secrets=secrets, size=size, ssh_keys=ssh_keys)))
                self.down.pop(name, None)
                return sandbox
            except SandstackError as error:
                if error.status != 503:
                    raise
                if isinstance(error, HostUnavailable):
                    self.down[name] = time.monotonic()
                refused.append(f"{name}: {error.message}")
                last = error
        kind = NoCapacity if isinstance(last, NoCapacity) else HostUnavailable
        raise kind(503, f"no host of pool {pool!r} could take session {session!r}: " + "; ".join(refused),
                   {"pool": pool, "hosts": refused})

    async def _claim_from(self, pool: str, session: str, ref: SnapshotRef,
                          secrets: Mapping[str, Mapping[str, str]] | None, size: str | None,
                          ssh_keys: Sequence[str] | None) -> AsyncSandbox:
        """A branch or a session restored from a snapshot: on the snapshot's host; when that host cannot take it
        (503: down, or no capacity), on the pool's other hosts in turn, which read it from the pool's snapshot store
        (docs/design/snapshot-store.md; a host without one answers 404 and the next is tried). None could: the
        snapshot's host's answer."""
        host = self.host(ref.host)
        try:
            return AsyncSandbox(host, await host.claim(pool, session, ref.id, secrets, size, ssh_keys))
        except SandstackError as error:
            if error.status != 503:
                raise
            if isinstance(error, HostUnavailable):
                self.down[ref.host] = time.monotonic()
            first = error
        for name in self.hosts_for(pool, session):
            if name == ref.host:
                continue
            other = self.hosts[name]
            try:
                return AsyncSandbox(other, await self._ready(other, await other.claim(
                    pool, session, ref.id, secrets, size, ssh_keys)))
            except SandstackError as error:
                if error.status not in (404, 503):
                    raise
        raise first

    async def _ready(self, host: AsyncHostClient, info: dict[str, Any]) -> dict[str, Any]:
        """A claim of a session another claim is creating on demand answers 'creating': wait for it (the claim that
        creates it answers only once it is ready), within the client's timeout."""
        deadline = time.monotonic() + self.timeout
        token = {k: info[k] for k in ("token", "token_expires_at") if k in info}  # shown once, in the claim's answer
        while info.get("status") == "creating" and time.monotonic() < deadline:
            await host.io.sleep(CREATING_POLL)
            info = {**await host.get_session(info["session"]), **token}
        return info

    async def sandbox(self, ref: str) -> AsyncSandbox:
        """A handle on `host/sandbox` (as printed by claims), for a sandbox some session holds."""
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


def hosts_in_order(pools: Mapping[str, list[str]], pool: str, session: str) -> list[str]:
    if pool not in pools:
        raise NotFound(404, f"pool {pool!r} is not in the stack outputs", {"pool": pool})
    hosts = pools[pool]
    start = int(hashlib.sha256(session.encode()).hexdigest(), 16) % len(hosts)
    return hosts[start:] + hosts[:start]


def answer_error(response: httpx.Response, host: str) -> SandstackError:
    """The typed error of a runtime's error answer (sandstack.client.errors)."""
    try:
        body = response.json()
        message = body.get("error", response.text) if isinstance(body, dict) else response.text
    except ValueError:
        body, message = {}, response.text or response.reason_phrase
    return error_for(response.status_code, message, body if isinstance(body, dict) else {}, host)


def _snapshot_ref(text: str) -> SnapshotRef:
    host, _, snapshot = text.partition("/")
    if not snapshot:
        raise ValueError(f"snapshot {text!r} must be given as HOST/SNAPSHOT-ID")
    return SnapshotRef(host, snapshot, {})
