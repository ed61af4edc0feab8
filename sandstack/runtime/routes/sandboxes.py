"""The routes of sandboxes: list, read, and pause or resume a bound one (by its container name)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from sandstack.runtime.models import SandboxStatus
from sandstack.runtime.routes.common import ERRORS, bound, note, require_token, runtime_of, sandbox_param, scope_of
from sandstack.runtime.tokens import check_pool, check_sandbox, pool_level

router = APIRouter(prefix="/v1", dependencies=[Depends(require_token)], responses=ERRORS)


@router.get("/sandboxes", response_model=list[SandboxStatus], operation_id="list_sandboxes")
def list_sandboxes(request: Request, pool: str | None = None) -> Any:
    pool_level(scope_of(request), "the sandboxes' listing")
    runtime = runtime_of(request)
    if pool is not None:
        check_pool(scope_of(request), pool, runtime.host)
        runtime.sandboxes.pool(pool)
    return [runtime.sandboxes.describe(row) for row in runtime.store.sandboxes(pool)
            if scope_of(request).allows(row.pool)]


@router.get("/sandboxes/{sandbox}", response_model=SandboxStatus, operation_id="get_sandbox")
def get_sandbox(request: Request, sandbox: str = sandbox_param()) -> Any:
    note(request, sandbox=sandbox)
    runtime = runtime_of(request)
    row = runtime.sandboxes.get(sandbox)
    check_sandbox(scope_of(request), row, runtime.host)
    note(request, session=row.session)
    return runtime.sandboxes.describe(row)


@router.post("/sandboxes/{sandbox}/pause", response_model=SandboxStatus, operation_id="pause")
def pause(request: Request, sandbox: str = sandbox_param()) -> Any:
    sandboxes = bound(request, sandbox).sandboxes
    return sandboxes.describe(sandboxes.pause(sandbox))


@router.post("/sandboxes/{sandbox}/resume", response_model=SandboxStatus, operation_id="resume")
def resume(request: Request, sandbox: str = sandbox_param()) -> Any:
    sandboxes = bound(request, sandbox).sandboxes
    return sandboxes.describe(sandboxes.resume(sandbox))
