"""The routes of snapshots: take one of a bound sandbox, restore one into it, and list, read and delete them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from sandstack.runtime.models import SNAPSHOT_PATTERN, RestoreRequest, Snapshot
from sandstack.runtime.retention import own_session
from sandstack.runtime.routes.common import ERRORS, bound, path_param, require_token, runtime_of, sandbox_param, \
    scope_of
from sandstack.runtime.session_keys import owner, shown
from sandstack.runtime.store import SnapshotRow
from sandstack.runtime.tokens import check_pool, check_snapshot

router = APIRouter(prefix="/v1", dependencies=[Depends(require_token)], responses=ERRORS)


def answer(row: SnapshotRow) -> dict[str, Any]:
    return {"id": row.id, "pool": row.pool, "sandbox": row.sandbox, "session": shown(row.session),
            "created_at": row.created_at, "size": row.size, "paths": row.paths.split("\n")}


def snapshot_param() -> Any:
    return path_param("The snapshot id.", SNAPSHOT_PATTERN)


@router.post("/sandboxes/{sandbox}/snapshots", response_model=Snapshot, status_code=201, operation_id="snapshot")
def snapshot(request: Request, sandbox: str = sandbox_param()) -> Any:
    """Snapshot the sandbox's writable paths onto the host."""
    return answer(bound(request, sandbox).snapshots.take(sandbox))


@router.post("/sandboxes/{sandbox}/restore", response_model=Snapshot, operation_id="restore")
def restore(body: RestoreRequest, request: Request, sandbox: str = sandbox_param()) -> Any:
    """Roll the sandbox's writable paths back to a snapshot of its own session (emptied first); another session's
    snapshot is a branch (POST /v1/sessions with `from_snapshot`): 409. With a writable root (`read_only_root:
    false`) the root is rolled back too: the container is stopped and started, which ends the session's
    processes (a running exec or transfer: 409, nothing done); a failure from there on ends the session (502)."""
    runtime = bound(request, sandbox)
    snap = runtime.snapshots.find(body.snapshot, runtime.sandboxes.get(sandbox).pool)  # this host's or the store's
    if snap is not None:
        check_snapshot(scope_of(request), body.snapshot, snap, runtime.host)
        own_session(snap, runtime.sandboxes.get(sandbox).session)
    return answer(runtime.sessions.restore(sandbox, body.snapshot))


@router.get("/snapshots", response_model=list[Snapshot], operation_id="list_snapshots")
def list_snapshots(request: Request, pool: str | None = None, session: str | None = None) -> Any:
    """The snapshots of the token's pools (a session's token: of its session), newest first; `session`: of the
    session the token's scope names so (the host's token: of any scope's session of that id)."""
    runtime, scope = runtime_of(request), scope_of(request)
    if pool is not None:
        check_pool(scope, pool, runtime.host)
        runtime.sandboxes.pool(pool)

    def shows(row: SnapshotRow) -> bool:
        if scope.session is not None:
            return row.session == scope.session and (session is None or shown(row.session) == session)
        if not scope.allows(row.pool):
            return False
        return session is None or (shown(row.session) == session and
                                   (scope.operator or owner(row.session or "") in (scope.name, None)))
    return [answer(row) for row in runtime.store.snapshots(pool=pool) if shows(row)]


@router.get("/snapshots/{snapshot_id}", response_model=Snapshot, operation_id="get_snapshot")
def get_snapshot(request: Request, snapshot_id: str = snapshot_param()) -> Any:
    runtime = runtime_of(request)
    row = runtime.snapshots.row(snapshot_id)
    check_snapshot(scope_of(request), snapshot_id, row, runtime.host)
    return answer(row)


@router.delete("/snapshots/{snapshot_id}", status_code=204, response_class=Response, response_model=None,
               operation_id="delete_snapshot")
def delete_snapshot(request: Request, snapshot_id: str = snapshot_param()) -> Any:
    runtime = runtime_of(request)
    check_snapshot(scope_of(request), snapshot_id, runtime.snapshots.row(snapshot_id), runtime.host)
    runtime.snapshots.delete(snapshot_id)
    return Response(status_code=204)
