"""The host's own routes: its health (no token), and for the host's token only its audit log, its metrics and the
API document."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from sandstack.runtime.answers import AsciiJSON
from sandstack.runtime.metrics import CONTENT_TYPE
from sandstack.runtime.models import AuditLine, Error, Health
from sandstack.runtime.routes.common import ERRORS, require_token, scope_of
from sandstack.runtime.tokens import operator_only

router = APIRouter()
v1 = APIRouter(prefix="/v1", dependencies=[Depends(require_token)], responses=ERRORS)


@router.get("/healthz", response_model=Health, include_in_schema=True, operation_id="health")
def health(request: Request) -> Any:
    """Liveness for the container's health check (no token, nothing about sandboxes), and the digest of the
    configuration in force (what a reload waits for)."""
    runtime = request.app.state.runtime
    return {"status": "ok", "host": runtime.host if runtime else None, "config": runtime.live.digest if runtime else None}


@router.get("/openapi.json", include_in_schema=False, dependencies=[Depends(require_token)])
def openapi(request: Request) -> Any:
    operator_only(scope_of(request), "the API document")
    return AsciiJSON(request.app.openapi())


@router.get("/metrics", dependencies=[Depends(require_token)], operation_id="metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE: {"schema": {"type": "string"}}},
                             "description": "Prometheus text format (sandstack.runtime.metrics)."},
                       401: {"model": Error}, 403: {"model": Error}, 503: {"model": Error}})
def metrics_(request: Request) -> Any:
    """The runtime's Prometheus metrics (the host's token only): sandboxes by pool and status, claims and their
    latency, execs, errors by kind, snapshots, on-demand creations, hibernations."""
    operator_only(scope_of(request), "the metrics")
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE)


@v1.get("/audit", response_model=list[AuditLine], operation_id="audit")
def audit(request: Request, limit: int = Query(100, ge=1, le=10000)) -> Any:
    """The newest audit lines, oldest first (the host's token only)."""
    operator_only(scope_of(request), "the audit log")
    return request.app.state.audit.tail(limit)
