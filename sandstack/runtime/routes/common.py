"""What every route module of the runtime's API shares: the bearer-token check, the error answers each route
may give, path parameters, the runtime's parts, and the audit notes of a call."""

from __future__ import annotations

from typing import Any

from fastapi import Path, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from sandstack.runtime.errors import ApiError
from sandstack.runtime.models import SANDBOX_PATTERN, SESSION_PATTERN, Error, pattern
from sandstack.runtime.service import Runtime
from sandstack.runtime.store import SandboxRow
from sandstack.runtime.tokens import Scope, check_sandbox, check_session

ACTOR_HEADER = "X-Sandstack-Actor"  # who the caller acts for (a user, an agent run): recorded, not trusted
bearer = HTTPBearer(auto_error=False, description="The host's runtime token, or a scoped token of some of its pools "
                                                  "(Pulumi secrets).")
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": Error}
                                           for code in (400, 401, 403, 404, 409, 413, 422, 502, 503, 504, 507)}
BINARY = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}


def path_param(description: str, regex: str) -> Any:
    return Path(description=description, **pattern(regex))


def sandbox_param() -> Any:
    return path_param("The sandbox's container name.", SANDBOX_PATTERN)


def session_param() -> Any:
    return path_param("The session id.", SESSION_PATTERN)


def runtime_of(request: Request) -> Runtime:
    return request.app.state.runtime


def note(request: Request, *, session: str | None = None, sandbox: str | None = None) -> None:
    """What the audit line of this call names."""
    if session is not None:
        request.state.session = session
    if sandbox is not None:
        request.state.sandbox = sandbox


async def require_token(request: Request, credentials: HTTPAuthorizationCredentials | None = Security(bearer)) -> None:
    # async: it never blocks, so it runs on the event loop; a plain function was a hop through the thread pool (and
    # back) on every call, before the route's own.
    given = credentials.credentials if credentials and credentials.scheme.lower() == "bearer" else ""
    # Constant time (sandstack.runtime.tokens): how much of a guess matched must not show in the response time.
    scope = request.app.state.tokens.scope(given)
    if scope is None:
        raise ApiError(401, "unauthorized")
    request.state.scope = scope


def scope_of(request: Request) -> Scope:
    return request.state.scope


def bound(request: Request, sandbox: str) -> Runtime:
    """The runtime, once the caller's token may act on `sandbox` (a scoped token: only its pools'; else 404)."""
    runtime = runtime_of(request)
    row = runtime.sandboxes.get(sandbox)
    check_sandbox(scope_of(request), sandbox, row.pool, runtime.host)
    note(request, sandbox=sandbox, session=row.session)
    request.state.pool = row.pool
    return runtime


def session_row(request: Request, session: str) -> SandboxRow:
    """The session's sandbox, once the caller's token may act on it (a scoped token: its pools' only; else 404)."""
    note(request, session=session)
    runtime = runtime_of(request)
    row = runtime.sandboxes.of_session(session)
    check_session(scope_of(request), session, row.pool, runtime.host)
    note(request, sandbox=row.name)
    return row
