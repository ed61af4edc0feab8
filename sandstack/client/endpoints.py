"""The runtime's endpoints as the clients call them: one request description (method, path, body, what the answer
is read as) per call, written once here for the sync and the async host clients, which differ only in how they
send it (`_send`, `_open`: sandstack.client.client.HostClient, sandstack.client.async_client.AsyncHostClient).
A method answers what `_send` does: the decoded answer (sync), or an awaitable of it (async)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import quote

import httpx

from sandstack.client.errors import CommandFailed, Conflict, NotFound
from sandstack.client.results import ExecResult, FileEntry

BINARY = {"Content-Type": "application/octet-stream"}


@dataclass(frozen=True)
class HostEndpoint:
    name: str
    url: str
    token: str


def parse_outputs(outputs: Mapping[str, Any]) -> tuple[dict[str, HostEndpoint], dict[str, list[str]]]:
    data = outputs.get("runtime", outputs)
    try:
        return {name: HostEndpoint(name, h["url"], h["token"]) for name, h in data["hosts"].items()}, data["pools"]
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"stack outputs lack the runtime's hosts and pools ({error})") from error


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
              secrets: Mapping[str, Mapping[str, str]] | None = None) -> Any:
        """`secrets`: this session's own, `{"env": {NAME: value}, "files": {name: content}}` (files under
        /run/secrets/session); never stored or logged by the runtime, gone at release."""
        body: dict[str, Any] = {"pool": pool, "session": session, "from_snapshot": from_snapshot}
        if secrets is not None:
            body["secrets"] = {kind: dict(values) for kind, values in secrets.items()}
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
        """A context manager (async with the async client): the file's answer, read as it comes."""
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
        """A context manager (async with the async client): the SSE response of the process's output from
        position `after`."""
        return self._open(Call("GET", f"/v1/sandboxes/{sandbox}/processes/{process}/output", options={
            "params": {"after": after, "follow": follow}, "timeout": httpx.Timeout(30, read=None)}))

    def watch(self, sandbox: str, path: str = "", interval: float = 0.5) -> Any:
        return self._send(Call("POST", f"/v1/sandboxes/{sandbox}/watch", options={
            "json": {"path": path, "interval": interval}}))


# What the sync and async sandbox handles make of the answers (sandstack.client.client.Sandbox, AsyncSandbox).

class Handle:
    """A claimed sandbox on `host`, from a claim's (or a status') answer."""

    def __init__(self, host: Any, info: Mapping[str, Any]):
        self.host = host
        self.name: str = info["sandbox"]
        self.pool: str = info["pool"]
        self.session: str = info["session"]
        self.info = dict(info)

    @property
    def ref(self) -> str:
        return f"{self.host.name}/{self.name}"


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
    """What the sync and async clients share of a stack's hosts: made from its outputs, a host by name."""

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
        return cls.from_outputs(json.loads(Path(path).read_text(encoding="utf-8")), **kwargs)

    def host(self, name: str) -> Any:
        if name not in self.hosts:
            raise NotFound(404, f"host {name!r} is not in the stack outputs", {"host": name})
        return self.hosts[name]
