"""Client, HostClient (one host's runtime, every endpoint) and Sandbox (a claimed sandbox's handle)."""

from __future__ import annotations

import hashlib
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

import httpx

from sandstack.client.errors import (
    CommandFailed,
    HostUnavailable,
    NoCapacity,
    NotFound,
    SandstackError,
    error_for,
    host_lost,
)
from sandstack.client.endpoints import (
    Call,
    Endpoints,
    Handle,
    HostEndpoint,
    Stack,
    dir_entries,
    exec_result,
    file_content,
    parse_outputs,
    refuse_directory,
    session_endpoint,
)
from sandstack.client.process import Process
from sandstack.client.pieces import in_pieces
from sandstack.client.results import ExecResult, FileEntry, NetworkProfile, ProcessInfo, SandboxInfo
from sandstack.client.retry import Retry
from sandstack.client.transfer import Destination, FileBody, Progress, Sink, Source, open_source

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


HttpFactory = Callable[[HostEndpoint, float, dict[str, str]], httpx.Client]


def _default_http(endpoint: HostEndpoint, timeout: float, headers: dict[str, str]) -> httpx.Client:
    return httpx.Client(base_url=endpoint.url, headers=headers, timeout=timeout)


class HostClient(Endpoints):
    """One host's runtime: a method per endpoint (sandstack.client.endpoints), JSON in and out; errors raise
    SandstackError."""

    def __init__(self, endpoint: HostEndpoint, *, timeout: float = 120, actor: str | None = None,
                 http_factory: HttpFactory = _default_http, retry: Retry = Retry()):
        self.endpoint = endpoint
        self.name = endpoint.name
        self.retry = retry
        headers = {"Authorization": f"Bearer {endpoint.token}"}
        if actor:
            headers[ACTOR_HEADER] = actor
        self.http = http_factory(endpoint, timeout, headers)

    def request(self, method: str, path: str, *, expect: str = "json", idempotent: bool = False,
                **kwargs: Any) -> Any:
        kwargs = in_pieces(kwargs)  # a large body: sent in pieces (sandstack.client.pieces says why)
        reached = False  # an earlier try was sent (its answer lost)
        for attempt in range(1, self.retry.attempts + 1):
            last = attempt == self.retry.attempts
            try:
                response = self.http.request(method, path, **kwargs)
            except httpx.TransportError as error:
                if last or not self.retry.on_error(method, error, idempotent):
                    raise host_lost(self.name, error) from error
                reached = reached or self.retry.reached(error)
                time.sleep(self.retry.delay(attempt))
                continue
            if response.status_code < 400:
                break
            error = answer_error(response, self.name)
            if self.retry.gone_already(method, error.status, reached):
                return None
            if last or not self.retry.on_status(error.status, error.message):
                raise error
            time.sleep(self.retry.delay(attempt))
        if expect == "bytes":
            return response.content
        if expect == "response":
            return response
        return response.json() if response.content else None

    @contextmanager
    def stream(self, method: str, path: str, **kwargs: Any) -> Iterator[httpx.Response]:
        """A response read as it comes (retried like `request` until its head arrives); a connection that fails
        after the retries, or breaks while the body is read, raises HostUnavailable like every other call."""
        for attempt in range(1, self.retry.attempts + 1):
            reading = False
            try:
                with self.http.stream(method, path, **kwargs) as response:
                    if response.status_code >= 400:
                        response.read()
                        error = answer_error(response, self.name)
                        if attempt < self.retry.attempts and self.retry.on_status(error.status, error.message):
                            time.sleep(self.retry.delay(attempt))
                            continue
                        raise error
                    reading = True
                    yield response
                    return
            except httpx.TransportError as error:
                if reading or attempt == self.retry.attempts or not self.retry.on_error(method, error):
                    raise host_lost(self.name, error) from error
                time.sleep(self.retry.delay(attempt))

    def _send(self, call: Call) -> Any:
        return self.request(call.method, call.path, expect=call.expect, idempotent=call.idempotent, **call.options)

    def _open(self, call: Call) -> Any:
        return self.stream(call.method, call.path, **call.options)

    def close(self) -> None:
        self.http.close()


class Sandbox(Handle):
    """A claimed sandbox: every call goes to the host that holds it. As a context manager, it is released at the
    end of the block."""

    host: HostClient

    @classmethod
    def connect(cls, url: str, session: str, token: str, *, host: str = "runtime", timeout: float = 120,
                actor: str | None = None, http_factory: HttpFactory = _default_http,
                retry: Retry = Retry()) -> Sandbox:
        """The handle of session `session`'s sandbox from its runtime's URL and the session's token alone (a claim's
        `sandbox.url`, `.session`, `.token`): it acts on that sandbox only; the pool's operations (claim, release,
        listings) answer Forbidden. `host` names the runtime in errors."""
        client = HostClient(session_endpoint(url, token, host), timeout=timeout, actor=actor,
                            http_factory=http_factory, retry=retry)
        sandbox = cls(client, {**client.get_session(session), "token": token})
        sandbox.connected = True
        return sandbox

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.connected:  # a session's token cannot release its session (the platform's token does): closed
            self.host.close()
        else:
            self.release()

    def exec(self, command: list[str] | None = None, *, script: str | None = None, lang: str = "bash",
             cwd: str | None = None, env: Mapping[str, str] | None = None, timeout: int | None = None,
             check: bool = False) -> ExecResult:
        """Runs the command to its end; `check`: raise CommandFailed when it exits non-zero."""
        answer = self.host.exec(self.name, command=command, script=script, lang=lang, cwd=cwd,
                                env=dict(env or {}), timeout=timeout)
        return exec_result(answer, check, self.host.name)

    def start(self, command: list[str] | None = None, *, script: str | None = None, lang: str = "bash",
              cwd: str | None = None, env: Mapping[str, str] | None = None, timeout: int | None = None,
              stdin: bool = False, output_limit: int | None = None) -> Process:
        """Starts the command and returns at once: a handle to follow its output, write its stdin, wait, kill."""
        info = self.host.start_process(self.name, command=command, script=script, lang=lang, cwd=cwd,
                                       env=dict(env or {}), timeout=timeout, stdin=stdin, output_limit=output_limit)
        return Process(self, ProcessInfo.of(info))

    def process(self, process_id: str) -> Process:
        return Process(self, ProcessInfo.of(self.host.process(self.name, process_id)))

    def processes(self) -> list[ProcessInfo]:
        return [ProcessInfo.of(p) for p in self.host.processes(self.name)]

    def watch(self, path: str = "", interval: float = 0.5):
        """Change events under a workspace directory (sandstack.client.watch.Watch), until stopped."""
        from sandstack.client.watch import Watch

        return Watch(Process(self, ProcessInfo.of(self.host.watch(self.name, path, interval))))

    def terminal(self, rows: int = 24, cols: int = 80, command: list[str] | None = None, mode: str = "raw"):
        """A context manager: a terminal (sandstack.client.terminal.Terminal) running a shell, or `command`;
        `mode="command"`: `Terminal.run(...)` returns each command's output and exit status apart."""
        from sandstack.client.terminal import open_terminal

        return open_terminal(self.host, self.name, rows, cols, command, mode)

    def read_file(self, path: str) -> bytes:
        return file_content(self.host.read_file(self.name, path), path, self.host.name)

    def list_dir(self, path: str = "") -> list[FileEntry]:
        return dir_entries(self.host.read_file(self.name, path), path, self.host.name)

    def write_file(self, path: str, data: bytes | str) -> None:
        self.host.write_file(self.name, path, data.encode() if isinstance(data, str) else data)

    def upload(self, path: str, source: Source, progress: Progress | None = None) -> None:
        """A local file (a path, or a binary file object from where it stands) into `path`, streamed: never held
        whole in memory (sandstack.client.transfer); `progress(sent, size)` after each MiB."""
        file, label, ours = open_source(source)
        try:
            self.host.upload_file(self.name, path, FileBody(file, label, self.host.name, progress))
        finally:
            if ours:
                file.close()

    def download(self, path: str, dest: Destination, progress: Progress | None = None) -> int:
        """The file at `path` into `dest` (a path: replaced only once all of it came; or a binary file object),
        streamed; its byte count. `progress(received, size)` after each piece received."""
        sink = Sink(dest, progress)
        try:
            with self.host.open_file(self.name, path) as response:
                refuse_directory(response, path, self.host.name)
                sink.announced(response.headers.get("content-length"))
                for chunk in response.iter_bytes():
                    sink.write(chunk)
                    sink.report()
                return sink.done(path, self.host.name)
        except BaseException:
            sink.abort()
            raise

    def delete_file(self, path: str) -> None:
        self.host.delete_file(self.name, path)

    def archive(self, fmt: str = "tar.gz") -> bytes:
        return self.host.archive(self.name, fmt)

    def snapshot(self) -> SnapshotRef:
        info = self.host.snapshot(self.name)
        return SnapshotRef(self.host.name, info["id"], info)

    def restore(self, snapshot: SnapshotRef | str) -> dict[str, Any]:
        return self.host.restore(self.name, snapshot.id if isinstance(snapshot, SnapshotRef) else snapshot)

    def pause(self) -> SandboxInfo:
        return SandboxInfo.of(self.host.pause(self.name))

    def resume(self) -> SandboxInfo:
        """Back from a pause or a hibernation (by the session: the runtime knows which)."""
        return SandboxInfo.of(self.host.resume_session(self.session))

    def network(self, profile: str | None = None) -> NetworkProfile:
        """The session's network profile; with `profile`, switched to it first (one its template declares: else
        SandstackError with the runtime's 422 naming them), in place: the gateway applies it from the next request."""
        if profile is None:
            return NetworkProfile.of(self.host.network(self.session))
        return NetworkProfile.of(self.host.switch_network(self.session, profile))

    def hibernate(self) -> SandboxInfo:
        """Stop it and keep its files (memory and CPU freed); any later call resumes it."""
        return SandboxInfo.of(self.host.hibernate(self.session))

    def status(self) -> SandboxInfo:
        return SandboxInfo.of(self.host.status(self.name))

    def release(self) -> SandboxInfo:
        answer = self.host.release(self.session)
        # None: an earlier try was done and its answer lost (sandstack.client.retry); the sandbox as it is now.
        return SandboxInfo.of(answer) if answer is not None else self.status()


class Client(Stack):
    """Every host of a stack's runtime; as a context manager, its connections are closed at the end."""

    def __init__(self, hosts: Mapping[str, HostEndpoint], pools: Mapping[str, list[str]], *, timeout: float = 120,
                 actor: str | None = None, http_factory: HttpFactory = _default_http, retry: Retry = Retry()):
        unknown = sorted({h for names in pools.values() for h in names} - set(hosts))
        if unknown:
            raise ValueError(f"pools name hosts without a runtime endpoint: {', '.join(unknown)}")
        self.pools = {pool: list(names) for pool, names in pools.items()}
        self.timeout = timeout
        self.down: dict[str, float] = {}  # host → when it last did not answer (claims try it last for DOWN_FOR s)
        self.hosts = {name: HostClient(endpoint, timeout=timeout, actor=actor, http_factory=http_factory,
                                       retry=retry)
                      for name, endpoint in hosts.items()}

    def hosts_for(self, pool: str, session: str) -> list[str]:
        """The pool's hosts in the order a claim tries them: rotated by the session id, so the same session
        goes to the same host first (its claim is idempotent there) and sessions spread over the hosts."""
        return hosts_in_order(self.pools, pool, session)

    def claim(self, pool: str, session: str, from_snapshot: SnapshotRef | str | None = None,
              secrets: Mapping[str, Mapping[str, str]] | None = None, size: str | None = None,
              ssh_keys: Sequence[str] | None = None) -> Sandbox:
        """A sandbox of `pool` for `session`; with a snapshot (SnapshotRef or 'host/snap-id'), on its host;
        `secrets`: the session's own (HostClient.claim); `size`: a size class of the pool (None: its own limits);
        `ssh_keys`: OpenSSH public key lines that log in to the session over SSH (docs/design/ssh.md).
        A class the pool does not declare raises the runtime's 422 at once (no other host is tried)."""
        if from_snapshot is not None:
            ref = from_snapshot if isinstance(from_snapshot, SnapshotRef) else _snapshot_ref(str(from_snapshot))
            host = self.host(ref.host)
            return Sandbox(host, host.claim(pool, session, ref.id, secrets, size, ssh_keys))
        refused: list[str] = []
        last: SandstackError | None = None
        order = self.hosts_for(pool, session)
        now = time.monotonic()
        # A host that did not answer lately goes last: after the first detection, a claim costs no timeout.
        order = sorted(order, key=lambda name: name in self.down and now - self.down[name] < DOWN_FOR)
        for name in order:
            host = self.hosts[name]
            try:
                sandbox = Sandbox(host, self._ready(host, host.claim(pool, session, secrets=secrets, size=size,
                                                                  ssh_keys=ssh_keys)))
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

    def _ready(self, host: HostClient, info: dict[str, Any]) -> dict[str, Any]:
        """A claim of a session another claim is creating on demand answers 'creating': wait for it (the claim that
        creates it answers only once it is ready), within the client's timeout."""
        deadline = time.monotonic() + self.timeout
        token = {k: info[k] for k in ("token", "token_expires_at") if k in info}  # shown once, in the claim's answer
        while info.get("status") == "creating" and time.monotonic() < deadline:
            time.sleep(CREATING_POLL)
            info = {**host.get_session(info["session"]), **token}
        return info

    def sandbox(self, ref: str) -> Sandbox:
        """A handle on `host/sandbox` (as printed by claims), for a sandbox some session holds."""
        host_name, name = self.sandbox_ref(ref)
        host = self.host(host_name)
        return Sandbox(host, host.status(name))

    def close(self) -> None:
        for host in self.hosts.values():
            host.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
