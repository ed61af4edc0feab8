"""The runtime's endpoints as the client calls them: one request description (method, path, body, what the answer
is read as) per call, sent by the host client (`_send`, `_open`: sandstack.client.async_client.AsyncHostClient);
and what the sandbox handle and the client make of stack outputs and answers (Handle, Stack)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence
from urllib.parse import quote

import httpx

from sandstack.client.blocking import face_name
from sandstack.files import read_json
from sandstack.client.errors import CommandFailed, Conflict, NotFound
from sandstack.client.results import ExecResult, FileEntry

BINARY = {"Content-Type": "application/octet-stream"}


@dataclass(frozen=True)
class HostEndpoint:
    name: str
    url: str
    token: str


OUTPUTS_LIMIT = 16 * 1024 * 1024  # `pulumi stack output --json`: a 1,000-sandbox stack's is a few hundred KiB
OUTPUTS_SHAPE = '{"hosts": {HOST: {"url", "token"}}, "pools": {POOL: [HOST, ...]}}'


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def parse_outputs(outputs: Any) -> tuple[dict[str, HostEndpoint], dict[str, list[str]]]:
    """Each host's endpoint and each pool's hosts from stack outputs (the runtime's, at the top level or under
    `runtime`), or a ValueError naming the JSON path of the first thing that is not what the client reads (a token's
    value is never shown)."""
    def refuse(path: str, what: str, got: Any) -> ValueError:
        return ValueError(f"{path}: expected {what}, got {_kind(got)} (stack outputs are {OUTPUTS_SHAPE}, as "
                          "`pulumi stack output --json --show-secrets` writes them)")

    if not isinstance(outputs, Mapping):
        raise refuse("$", "an object", outputs)
    root, data = ("$.runtime", outputs["runtime"]) if "runtime" in outputs else ("$", outputs)
    if not isinstance(data, Mapping):
        raise refuse(root, "an object", data)
    hosts, pools = data.get("hosts"), data.get("pools")
    if not isinstance(hosts, Mapping):
        raise refuse(f"{root}.hosts", "an object of hosts", hosts)
    if not isinstance(pools, Mapping):
        raise refuse(f"{root}.pools", "an object of pools", pools)
    endpoints = {}
    for name, host in hosts.items():
        where = f"{root}.hosts.{name}"
        if not isinstance(host, Mapping):
            raise refuse(where, "an object with url and token", host)
        url, token = host.get("url"), host.get("token")
        if not isinstance(url, str):
            raise refuse(f"{where}.url", "the runtime's URL, 'http://…' or 'https://…'", url)
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"{where}.url: expected the runtime's URL, 'http://…' or 'https://…', "
                             f"got {url[:60]!r}")
        if not isinstance(token, str) or not token:
            raise refuse(f"{where}.token", "the runtime's token, a string", token)
        endpoints[name] = HostEndpoint(name, url, token)
    placed = {}
    for name, names in pools.items():
        where = f"{root}.pools.{name}"
        if not isinstance(names, list) or not all(isinstance(h, str) for h in names):
            raise refuse(where, "a list of host names", names)
        unknown = [h for h in names if h not in endpoints]
        if unknown:
            raise ValueError(f"{where}: host {unknown[0]!r} is not in {root}.hosts")
        placed[name] = list(names)
    return endpoints, placed


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    expect: str = "json"  # json, bytes (the body), response (the httpx.Response itself)
    options: dict[str, Any] = field(default_factory=dict)  # httpx's: json, params, content, headers, timeout
    # A POST the runtime answers the same when it comes twice (a claim: by session), so a try whose answer was lost
    # may be sent again (sandstack.client.retry).
    idempotent: bool = False


def segment(value: str) -> str:
    """A session id as one URL path segment."""
    return quote(value, safe="")


def file_path(path: str) -> str:
    """A workspace path as URL path segments, sent as given: '.' and '..' percent-encoded so that no HTTP client
    or proxy resolves them on the way (the runtime refuses a path out of the root with 403, which says so)."""
    return "/".join(part.replace(".", "%2E") if part in (".", "..") else quote(part, safe="")
                    for part in path.split("/"))


class Endpoints:
    """Every endpoint, sent by the subclass."""

    def _send(self, call: Call) -> Any:
        raise NotImplementedError

    def _open(self, call: Call) -> Any:
        raise NotImplementedError

    # Sessions and sandboxes
    def claim(self, pool: str, session: str, from_snapshot: str | None = None,
              secrets: Mapping[str, Mapping[str, str]] | None = None, size: str | None = None,
              ssh_keys: Sequence[str] | None = None) -> Any:
        """`secrets`: this session's own, `{"env": {NAME: value}, "files": {name: content}}` (files under
        /run/secrets/session); never stored or logged by the runtime, gone at release. `size`: a size class of the
        pool (`pools.*.sizes`); None: the pool's own limits."""
        body: dict[str, Any] = {"pool": pool, "session": session, "from_snapshot": from_snapshot}
        if size is not None:  # only when named: a runtime from before size classes takes the claim as it was
            body["size"] = size
        if secrets is not None:
            body["secrets"] = {kind: dict(values) for kind, values in secrets.items()}
        if ssh_keys is not None:  # OpenSSH public key lines for the session's SSH logins (docs/design/ssh.md)
            body["ssh_keys"] = list(ssh_keys)
        return self._send(Call("POST", "/v1/sessions", options={"json": body}, idempotent=True))

    def get_session(self, session: str) -> Any:
        return self._send(Call("GET", f"/v1/sessions/{segment(session)}"))

    def release(self, session: str) -> Any:
        return self._send(Call("DELETE", f"/v1/sessions/{segment(session)}"))

    def hibernate(self, session: str) -> Any:
        """Stop the session's sandbox, keeping its files; its next call (or `resume_session`) brings it back."""
        return self._send(Call("POST", f"/v1/sessions/{segment(session)}/hibernate"))

    def resume_session(self, session: str) -> Any:
        """Bring a hibernated or paused session's sandbox back."""
        return self._send(Call("POST", f"/v1/sessions/{segment(session)}/resume"))

    def network(self, session: str) -> Any:
        """The session's network profile in force, its start profile and every profile its template declares."""
        return self._send(Call("GET", f"/v1/sessions/{segment(session)}/network"))

    def switch_network(self, session: str, profile: str) -> Any:
        """Switch the session's sandbox to another declared network profile, in place; the same switch twice leaves
        the same state, so a try whose answer was lost is sent again."""
        return self._send(Call("POST", f"/v1/sessions/{segment(session)}/network",
                               options={"json": {"profile": profile}}, idempotent=True))

    def pools(self) -> Any:
        """Each pool on the host: sandboxes by status, snapshot storage used and declared, transfer limits."""
        return self._send(Call("GET", "/v1/pools"))

    def sandboxes(self, pool: str | None = None) -> Any:
        return self._send(Call("GET", "/v1/sandboxes", options={"params": {"pool": pool} if pool else None}))

    def status(self, sandbox: str) -> Any:
        return self._send(Call("GET", f"/v1/sandboxes/{sandbox}"))

    def exec(self, sandbox: str, **body: Any) -> Any:
        return self._send(Call("POST", f"/v1/sandboxes/{sandbox}/exec", options={"json": body}))

    def read_file(self, sandbox: str, path: str) -> Any:
        return self._send(Call("GET", f"/v1/sandboxes/{sandbox}/files/{file_path(path)}", "response"))

    def write_file(self, sandbox: str, path: str, data: bytes) -> Any:
        return self._send(Call("PUT", f"/v1/sandboxes/{sandbox}/files/{file_path(path)}",
                               options={"content": data, "headers": BINARY}))

    def upload_file(self, sandbox: str, path: str, body: Any) -> Any:
        """`body`: a sandstack.client.transfer.FileBody, read as it is sent."""
        return self._send(Call("PUT", f"/v1/sandboxes/{sandbox}/files/{file_path(path)}",
                               options={"content": body, "headers": {**BINARY, **body.headers()}}))

    def open_file(self, sandbox: str, path: str) -> Any:
        """A context manager (`async with` on the async client): the file's answer, read as it comes."""
        return self._open(Call("GET", f"/v1/sandboxes/{sandbox}/files/{file_path(path)}"))

    def delete_file(self, sandbox: str, path: str) -> Any:
        return self._send(Call("DELETE", f"/v1/sandboxes/{sandbox}/files/{file_path(path)}"))

    def archive(self, sandbox: str, fmt: str = "tar.gz") -> Any:
        return self._send(Call("GET", f"/v1/sandboxes/{sandbox}/archive", "bytes", {"params": {"format": fmt}}))

    def snapshot(self, sandbox: str) -> Any:
        return self._send(Call("POST", f"/v1/sandboxes/{sandbox}/snapshots"))

    def restore(self, sandbox: str, snapshot: str) -> Any:
        return self._send(Call("POST", f"/v1/sandboxes/{sandbox}/restore", options={"json": {"snapshot": snapshot}}))

    def pause(self, sandbox: str) -> Any:
        return self._send(Call("POST", f"/v1/sandboxes/{sandbox}/pause"))

    def resume(self, sandbox: str) -> Any:
        return self._send(Call("POST", f"/v1/sandboxes/{sandbox}/resume"))

    # Snapshots and audit
    def snapshots(self, pool: str | None = None, session: str | None = None) -> Any:
        params = {k: v for k, v in (("pool", pool), ("session", session)) if v}
        return self._send(Call("GET", "/v1/snapshots", options={"params": params}))

    def get_snapshot(self, snapshot: str) -> Any:
        return self._send(Call("GET", f"/v1/snapshots/{snapshot}"))

    def delete_snapshot(self, snapshot: str) -> Any:
        return self._send(Call("DELETE", f"/v1/snapshots/{snapshot}"))

    def audit(self, limit: int = 100) -> Any:
        return self._send(Call("GET", "/v1/audit", options={"params": {"limit": limit}}))

    # Processes
    def start_process(self, sandbox: str, **body: Any) -> Any:
        return self._send(Call("POST", f"/v1/sandboxes/{sandbox}/processes", options={"json": body}))

    def processes(self, sandbox: str) -> Any:
        return self._send(Call("GET", f"/v1/sandboxes/{sandbox}/processes"))

    def process(self, sandbox: str, process: str) -> Any:
        return self._send(Call("GET", f"/v1/sandboxes/{sandbox}/processes/{process}"))

    def write_stdin(self, sandbox: str, process: str, data: bytes, close: bool = False) -> Any:
        return self._send(Call("POST", f"/v1/sandboxes/{sandbox}/processes/{process}/stdin",
                               options={"content": data, "params": {"close": close}, "headers": BINARY}))

    def wait_process(self, sandbox: str, process: str, timeout: float) -> Any:
        return self._send(Call("POST", f"/v1/sandboxes/{sandbox}/processes/{process}/wait",
                               options={"params": {"timeout": timeout}, "timeout": timeout + 30}))

    def kill_process(self, sandbox: str, process: str) -> Any:
        return self._send(Call("POST", f"/v1/sandboxes/{sandbox}/processes/{process}/kill"))

    def process_output(self, sandbox: str, process: str, after: int = 0, follow: bool = True) -> Any:
        """A context manager (`async with` on the async client): the SSE response of the process's output from
        position `after`."""
        return self._open(Call("GET", f"/v1/sandboxes/{sandbox}/processes/{process}/output", options={
            "params": {"after": after, "follow": follow}, "timeout": httpx.Timeout(30, read=None)}))

    def watch(self, sandbox: str, path: str = "", interval: float = 0.5) -> Any:
        return self._send(Call("POST", f"/v1/sandboxes/{sandbox}/watch", options={
            "json": {"path": path, "interval": interval}}))


# What the sandbox handle makes of the answers (sandstack.client.async_client.AsyncSandbox).

class Handle:
    """A claimed sandbox on `host`, from a claim's (or a status') answer. A claim's answer carries the session's own
    token (`token`, shown once by the runtime): hand (`url`, `session`, `token`) to an agent or a browser's backend,
    which rebuilds the handle with `Sandbox.connect` and reaches this session's sandbox and nothing else."""

    def __init__(self, host: Any, info: Mapping[str, Any]):
        self.host = host
        self.name: str = info["sandbox"]
        self.pool: str = info["pool"]
        self.session: str = info["session"]
        self.token: str | None = info.get("token")  # None: a handle made from a status, not from a claim
        self.token_expires_at: float | None = info.get("token_expires_at")
        self.info = {k: v for k, v in info.items() if k != "token"}  # the token is not a status field to print
        self.connected = False  # made by `connect` from a session's token: closed, not released, by `with`

    @property
    def ref(self) -> str:
        return f"{self.host.name}/{self.name}"

    @property
    def url(self) -> str:
        """The runtime's URL that holds this sandbox (with `session` and `token`: what `connect` needs)."""
        return self.host.endpoint.url

    def __repr__(self) -> str:  # never the token
        return f"<{face_name(self)} {self.ref} session={self.session!r}>"


def session_endpoint(url: str, token: str, host: str) -> HostEndpoint:
    """The endpoint a session's token reaches its sandbox by (`Sandbox.connect`); a ValueError names what is wrong,
    never the token's value."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"url: expected the runtime's URL, 'http://…' or 'https://…', got {url[:60]!r}")
    if not isinstance(token, str) or not token:
        raise ValueError("token: expected the session's token of a claim's answer, a non-empty string")
    return HostEndpoint(host, url, token)


def exec_result(answer: Mapping[str, Any], check: bool, host: str) -> ExecResult:
    """The exec's result; `check`: CommandFailed when it exited non-zero."""
    result = ExecResult.of(answer)
    if check and result.exit_code != 0:
        raise CommandFailed(result, host)
    return result


def file_content(response: httpx.Response, path: str, host: str) -> bytes:
    refuse_directory(response, path, host)
    return response.content


def refuse_directory(response: httpx.Response, path: str, host: str) -> None:
    """A file's answer that is a directory's listing (JSON) is refused: read_file and download want a file."""
    if response.headers.get("content-type", "").startswith("application/json"):
        raise Conflict(409, f"path {path!r} is a directory; use list_dir", {"path": path, "type": "dir"}, host)


def dir_entries(response: httpx.Response, path: str, host: str) -> list[FileEntry]:
    if not response.headers.get("content-type", "").startswith("application/json"):
        raise Conflict(409, f"path {path!r} is a file; use read_file", host=host)
    return [FileEntry.of(entry) for entry in response.json()["entries"]]


class Stack:
    """A stack's hosts: made from its outputs, a host by name."""

    pools: dict[str, list[str]]
    hosts: dict[str, Any]

    @classmethod
    def from_outputs(cls, outputs: Mapping[str, Any], **kwargs: Any) -> Any:
        """From stack outputs: `{"hosts": {host: {"url", "token"}}, "pools": {pool: [host, ...]}}`, at the top
        level or under a `runtime` key (`pulumi stack output --json --show-secrets`)."""
        hosts, pools = parse_outputs(outputs)
        return cls(hosts, pools, **kwargs)  # type: ignore[call-arg]

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> Any:
        """From a file of stack outputs, read as every command reads a file (sandstack.files: a regular file, at
        most OUTPUTS_LIMIT): UnreadableFile (an OSError) when it cannot be read, ValueError naming the file and
        where in it when it is not the outputs' JSON."""
        data = read_json(path, OUTPUTS_LIMIT, "a stack outputs file")
        try:
            hosts, pools = parse_outputs(data)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None
        return cls(hosts, pools, **kwargs)  # type: ignore[call-arg]

    @staticmethod
    def sandbox_ref(ref: str) -> tuple[str, str]:
        """(host, sandbox) of `HOST/SANDBOX` as a claim prints it, or a ValueError saying what was given: a bare
        name once reached the runtime as the sandbox '' (a listing, where a sandbox's status was read)."""
        host, sep, name = ref.partition("/")
        if not sep or not host or not name or "/" in name:
            raise ValueError(f"{ref!r} is not HOST/SANDBOX as a claim prints it, e.g. 'local/sandstack-dev-python-0'")
        return host, name

    def host(self, name: str) -> Any:
        if name not in self.hosts:
            raise NotFound(404, f"host {name!r} is not in the stack outputs", {"host": name})
        return self.hosts[name]
