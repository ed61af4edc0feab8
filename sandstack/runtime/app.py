"""The runtime's HTTP API (FastAPI): bearer-token auth, one audit line per call, errors as JSON without a
traceback, and the routes over `Runtime`."""

from __future__ import annotations

import inspect
import logging
import threading
from collections import Counter
from contextlib import asynccontextmanager
from typing import Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.convertors import Convertor, register_url_convertor

from sandstack.runtime.answers import AsciiJSON, install_errors
from sandstack.runtime.audit import AuditLog
from sandstack.runtime.audited import Audited
from sandstack.runtime.metrics import CONTENT_TYPE, make_metrics
from sandstack.runtime.errors import ApiError
from sandstack.runtime.models import (
    SANDBOX_PATTERN,
    SESSION_PATTERN,
    SNAPSHOT_PATTERN,
    AuditLine,
    ClaimRequest,
    Error,
    ExecRequest,
    ExecResult,
    Health,
    Listing,
    PoolStatus,
    RestoreRequest,
    SandboxStatus,
    Snapshot,
    pattern,
)
from sandstack.runtime.routing import (
    BINARY,
    ERRORS,
    _bound,
    _note,
    _path,
    _runtime,
    _scope,
    _sandbox,
    bearer,
    require_token,
)
from sandstack.runtime.service import Runtime
from sandstack.runtime.session_api import add_routes as add_session_routes
from sandstack.runtime.store import SnapshotRow
from sandstack.runtime.credentials import check_names
from sandstack.runtime.retention import own_session
from sandstack.runtime.threads import widen_threads
from sandstack.runtime.tokens import (Scope, Tokens, check_claim, check_pool, check_sandbox, check_session,
                                      check_snapshot, operator_only)
from sandstack.runtime.workspace import ARCHIVE_FORMATS
from sandstack.runtime import process_routes, secret_files, terminal, wake, watch

log = logging.getLogger("sandstack.runtime")
VERSION = "1"
class FilePath(Convertor):
    """A file path in the workspace, slashes and every other character included: Starlette's own `path`
    convertor ('.*') stops at a newline, so a listed name holding one could not be read, written or deleted."""

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("sandstack_file_path", FilePath())


def _snapshot(row: SnapshotRow) -> dict[str, Any]:
    return {"id": row.id, "pool": row.pool, "sandbox": row.sandbox, "session": row.session,
            "created_at": row.created_at, "size": row.size, "paths": row.paths.split("\n")}


def _chunks(file, size: int = 64 * 1024):
    with file:
        while chunk := file.read(size):
            yield chunk


router = APIRouter(prefix="/v1", dependencies=[Depends(require_token)], responses=ERRORS)


@router.post("/sessions", response_model=SandboxStatus, status_code=201, operation_id="claim",
             responses={200: {"model": SandboxStatus, "description": "The session already had this sandbox."}})
def claim(body: ClaimRequest, request: Request) -> Any:
    """Claim an idle sandbox of the pool for the session (idempotent), optionally starting from a snapshot."""
    _note(request, session=body.session)
    request.state.pool = body.pool
    runtime = _runtime(request)
    check_claim(_scope(request), runtime.store, runtime.host, body.pool, body.session, body.from_snapshot)
    check_names(body.secrets.env if body.secrets else {})  # before anything is bound
    row, created = runtime.claim(body.pool, body.session, body.from_snapshot)
    _note(request, sandbox=row.name)
    if body.secrets is not None:
        had_files = bool(runtime.credentials.files(row.name))
        runtime.credentials.give(row.name, body.session, body.secrets.env, body.secrets.files)
        request.state.secrets = sorted(body.secrets.env) + [f"{secret_files.SESSION_SECRETS_DIR}/{name}"
                                                            for name in sorted(body.secrets.files)]
        # Files given before and none now: removed. A sandbox another claim of the session is still creating gets
        # them from that claim (its own secrets), not from this one, which cannot write into it yet.
        if (body.secrets.files or had_files) and row.status != "creating":
            secret_files.write(runtime, row.name, body.secrets.files)
    # A new binding's container was just found running (or started, or created and ready): not asked again.
    return AsciiJSON(runtime.describe(row, "running" if created else None), status_code=201 if created else 200)


@router.get("/sessions/{session}", response_model=SandboxStatus, operation_id="get_session")
def get_session(request: Request, session: str = _path("The session id.", SESSION_PATTERN)) -> Any:
    _note(request, session=session)
    runtime = _runtime(request)
    row = runtime.session(session)
    check_session(_scope(request), session, row.pool, runtime.host)
    _note(request, sandbox=row.name)
    return runtime.describe(row)


@router.delete("/sessions/{session}", response_model=SandboxStatus, operation_id="release")
def release(request: Request, session: str = _path("The session id.", SESSION_PATTERN)) -> Any:
    """Release the session: its sandbox is reset (stopped, its disk workspaces emptied, started with fresh tmpfs
    paths) and returns to the pool; one whose reset fails is 'quarantined' (the answer's `detail` says why)."""
    _note(request, session=session)
    runtime = _runtime(request)
    row = runtime.session(session)
    check_session(_scope(request), session, row.pool, runtime.host)
    _note(request, sandbox=row.name)
    return runtime.describe(runtime.release(session))


@router.get("/pools", response_model=list[PoolStatus], operation_id="list_pools")
def list_pools(request: Request) -> Any:
    """Each pool on this host: its sandboxes by status, and what its snapshots take of their storage."""
    runtime = _runtime(request)
    answer = []
    for pool, spec in runtime.config.pools.items():
        if not _scope(request).allows(pool):
            continue
        snapshots = runtime.store.snapshots(pool=pool)
        answer.append({"pool": pool, "host": runtime.host,
                       "sandboxes": dict(Counter(row.status for row in runtime.store.sandboxes(pool))),
                       "snapshots": len(snapshots), "snapshot_bytes": sum(snap.size for snap in snapshots),
                       "hibernated_bytes": runtime.workspace.storage.copies(pool),
                       "snapshot_storage": spec.snapshot_storage_bytes,
                       "session_snapshot_storage": spec.session_snapshot_storage_bytes,
                       "download_limit": spec.download_limit_bytes, "upload_limit": spec.upload_limit_bytes})
    return answer


@router.get("/sandboxes", response_model=list[SandboxStatus], operation_id="list_sandboxes")
def list_sandboxes(request: Request, pool: str | None = None) -> Any:
    runtime = _runtime(request)
    if pool is not None:
        check_pool(_scope(request), pool, runtime.host)
        runtime.pool(pool)
    return [runtime.describe(row) for row in runtime.store.sandboxes(pool) if _scope(request).allows(row.pool)]


@router.get("/sandboxes/{sandbox}", response_model=SandboxStatus, operation_id="get_sandbox")
def get_sandbox(request: Request, sandbox: str = _sandbox()) -> Any:
    _note(request, sandbox=sandbox)
    runtime = _runtime(request)
    row = runtime.sandbox(sandbox)
    check_sandbox(_scope(request), sandbox, row.pool, runtime.host)
    _note(request, session=row.session)
    return runtime.describe(row)


@router.post("/sandboxes/{sandbox}/exec", response_model=ExecResult, operation_id="exec", name="exec")
def exec_(body: ExecRequest, request: Request, sandbox: str = _sandbox()) -> Any:
    """Run a command (argv) or a script; stdout, stderr, exit code and duration come back."""
    runtime = _bound(request, sandbox)
    # The session's run-scoped secrets are added by the process layer (sandstack.runtime.processes.command).
    result = runtime.exec(sandbox, command=body.command, script=body.script, lang=body.lang, cwd=body.cwd,
                          env=body.env, timeout=body.timeout)
    request.state.exec_outcome = "timed_out" if result.get("timed_out") else "ok"
    return result


@router.get("/sandboxes/{sandbox}/files/{path:sandstack_file_path}", operation_id="read_file",
            responses={200: {"model": Listing, "content": BINARY,
                             "description": "A file's bytes, or a directory's listing as JSON."}})
def read_file(request: Request, path: str, sandbox: str = _sandbox()) -> Any:
    from sandstack.runtime.files_stream import open_read  # streamed from the sandbox, never spooled whole

    opened = open_read(_bound(request, sandbox).workspace, sandbox, path)
    if opened.entries is not None:
        return AsciiJSON({"path": path, "entries": opened.entries})
    return StreamingResponse(opened.chunks, media_type="application/octet-stream",
                             headers={} if opened.size is None else {"Content-Length": str(opened.size)})


@router.put("/sandboxes/{sandbox}/files/{path:sandstack_file_path}", status_code=204, response_class=Response, response_model=None,
            operation_id="write_file",
            openapi_extra={"requestBody": {"required": True, "content": BINARY}})
async def write_file(request: Request, path: str, sandbox: str = _sandbox()) -> Any:
    """Write a file (parents are created); over the pool's upload limit → 413."""
    from sandstack.runtime.files_upload import upload  # streamed into the sandbox, never spooled

    runtime = await run_in_threadpool(_bound, request, sandbox)
    await upload(request, runtime, sandbox, path)
    return Response(status_code=204)


@router.delete("/sandboxes/{sandbox}/files/{path:sandstack_file_path}", status_code=204, response_class=Response, response_model=None,
            operation_id="delete_file")
def delete_file(request: Request, path: str, sandbox: str = _sandbox()) -> Any:
    _bound(request, sandbox).workspace.delete(sandbox, path)
    return Response(status_code=204)


@router.get("/sandboxes/{sandbox}/archive", operation_id="archive",
            responses={200: {"content": {media: {"schema": {"type": "string", "format": "binary"}}
                                         for media in ARCHIVE_FORMATS.values()},
                             "description": "The workspace as an archive."}})
def archive(request: Request, sandbox: str = _sandbox(),
            format: Literal["tar.gz", "zip"] = Query("tar.gz", description="The archive format.")) -> Any:
    """The workspace as a tar.gz or zip (a session's 'download your work')."""
    packed = _bound(request, sandbox).workspace.archive(sandbox, format)
    headers = {"Content-Disposition": f'attachment; filename="{sandbox}-workspace.{format}"'}
    return StreamingResponse(_chunks(packed), media_type=ARCHIVE_FORMATS[format], headers=headers)


@router.post("/sandboxes/{sandbox}/snapshots", response_model=Snapshot, status_code=201, operation_id="snapshot")
def snapshot(request: Request, sandbox: str = _sandbox()) -> Any:
    """Snapshot the sandbox's writable paths onto the host."""
    return _snapshot(_bound(request, sandbox).workspace.snapshot(sandbox))


@router.post("/sandboxes/{sandbox}/restore", response_model=Snapshot, operation_id="restore")
def restore(body: RestoreRequest, request: Request, sandbox: str = _sandbox()) -> Any:
    """Roll the sandbox's writable paths back to a snapshot of its own session (emptied first); another session's
    snapshot is a branch (POST /v1/sessions with `from_snapshot`): 409. With a writable root (`read_only_root:
    false`) the root is rolled back too: the container is stopped and started, which ends the session's
    processes (a running exec or transfer: 409, nothing done); a failure from there on ends the session (502)."""
    runtime = _bound(request, sandbox)
    snap = runtime.store.snapshot(body.snapshot)
    if snap is not None:
        check_snapshot(_scope(request), body.snapshot, snap.pool, runtime.host)
        own_session(snap, runtime.sandbox(sandbox).session)
    return _snapshot(runtime.workspace.restore(sandbox, body.snapshot))


@router.post("/sandboxes/{sandbox}/pause", response_model=SandboxStatus, operation_id="pause")
def pause(request: Request, sandbox: str = _sandbox()) -> Any:
    runtime = _bound(request, sandbox)
    return runtime.describe(runtime.pause(sandbox))


@router.post("/sandboxes/{sandbox}/resume", response_model=SandboxStatus, operation_id="resume")
def resume(request: Request, sandbox: str = _sandbox()) -> Any:
    runtime = _bound(request, sandbox)
    return runtime.describe(runtime.resume(sandbox))


@router.get("/snapshots", response_model=list[Snapshot], operation_id="list_snapshots")
def list_snapshots(request: Request, pool: str | None = None, session: str | None = None) -> Any:
    runtime = _runtime(request)
    if pool is not None:
        check_pool(_scope(request), pool, runtime.host)
        runtime.pool(pool)
    return [_snapshot(row) for row in runtime.store.snapshots(pool=pool, session=session)
            if _scope(request).allows(row.pool)]


@router.get("/snapshots/{snapshot_id}", response_model=Snapshot, operation_id="get_snapshot")
def get_snapshot(request: Request, snapshot_id: str = _path("The snapshot id.", SNAPSHOT_PATTERN)) -> Any:
    runtime = _runtime(request)
    row = runtime.workspace.snapshot_row(snapshot_id)
    check_snapshot(_scope(request), snapshot_id, row.pool, runtime.host)
    return _snapshot(row)


@router.delete("/snapshots/{snapshot_id}", status_code=204, response_class=Response, response_model=None,
            operation_id="delete_snapshot")
def delete_snapshot(request: Request, snapshot_id: str = _path("The snapshot id.", SNAPSHOT_PATTERN)) -> Any:
    runtime = _runtime(request)
    check_snapshot(_scope(request), snapshot_id, runtime.workspace.snapshot_row(snapshot_id).pool, runtime.host)
    runtime.workspace.delete_snapshot(snapshot_id)
    return Response(status_code=204)


@router.get("/audit", response_model=list[AuditLine], operation_id="audit")
def audit(request: Request, limit: int = Query(100, ge=1, le=10000)) -> Any:
    """The newest audit lines, oldest first (the host's token only)."""
    operator_only(_scope(request), "the audit log")
    return request.app.state.audit.tail(limit)


add_session_routes(router, _runtime, _note)  # hibernate and resume, by session
wake.add_routes(router)  # the ingress's wake of a site's sandbox


def create_app(runtime: Runtime | None, *, token: str = "", audit: AuditLog | None = None,
               monitor: bool = True, tokens: Tokens | None = None) -> FastAPI:
    """The API over `runtime` (None only to render the OpenAPI document); `tokens`: the host's and the scoped
    ones (default: `token` alone)."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start_monitor() -> None:
        if runtime is not None and monitor:
            threads.append(threading.Thread(target=_monitor, args=(runtime, stop), name="sandstack-monitor",
                                            daemon=True))
            threads[-1].start()

    def stop_monitor() -> None:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        if runtime is not None and monitor:
            runtime.ondemand.shutdown()  # no on-demand container outlives the runtime (docs/design/ondemand.md)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        widen_threads()
        start_monitor()
        yield
        stop_monitor()

    # FastAPI takes `lifespan` from 0.93; Debian's (the infra image's) is 0.92, where the app's startup and
    # shutdown events start and stop the monitor instead.
    modern = "lifespan" in inspect.signature(FastAPI.__init__).parameters
    # The document is served only with the token (below): it names every operation and limit of the host.
    app = FastAPI(title="sandstack runtime", version=VERSION, docs_url=None, redoc_url=None, openapi_url=None,
                  default_response_class=AsciiJSON,
                  description="Sessions claim the warm sandboxes sandstack declared on this host, run commands, "
                              "move files, snapshot, branch, pause and resume them, and release them.",
                  **({"lifespan": lifespan} if modern else {}))
    if not modern:
        app.router.on_startup.append(widen_threads)
        app.router.on_startup.append(start_monitor)
        app.router.on_shutdown.append(stop_monitor)
    app.state.runtime, app.state.audit = runtime, audit
    app.state.tokens = tokens or Tokens(token)
    metrics = app.state.metrics = make_metrics(runtime)
    if runtime is not None:
        runtime.metrics = metrics  # the runtime's own operations feed it too (Metrics.created, hibernated...)
    install_errors(app)

    app.add_middleware(Audited, audit=audit, metrics=metrics)  # every call's audit line and metrics

    @app.get("/healthz", response_model=Health, include_in_schema=True, operation_id="health")
    def health() -> Any:
        """Liveness for the container's health check (no token, nothing about sandboxes)."""
        return {"status": "ok", "host": runtime.host if runtime else None}

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(require_token)])
    def openapi(request: Request) -> Any:
        operator_only(_scope(request), "the API document")
        return AsciiJSON(app.openapi())

    @app.get("/metrics", dependencies=[Depends(require_token)], operation_id="metrics", response_class=Response,
             responses={200: {"content": {CONTENT_TYPE: {"schema": {"type": "string"}}},
                              "description": "Prometheus text format (sandstack.runtime.metrics)."},
                        401: {"model": Error}, 403: {"model": Error}, 503: {"model": Error}})
    def metrics_(request: Request) -> Any:
        """The runtime's Prometheus metrics (the host's token only): sandboxes by pool and status, claims and their
        latency, execs, errors by kind, snapshots, on-demand creations, hibernations."""
        operator_only(_scope(request), "the metrics")
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    app.include_router(router)
    app.include_router(process_routes.router)
    app.include_router(terminal.router)
    app.include_router(watch.router)
    return app


def _monitor(runtime: Runtime, stop: threading.Event) -> None:
    while not stop.wait(runtime.config.idle_check_seconds):
        try:
            runtime.monitor_once()
        except Exception:  # the monitor must outlive any one bad pass
            log.exception("monitor pass failed")
