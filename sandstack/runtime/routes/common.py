"""What every route module of the runtime's API shares: the bearer-token check, the error answers each route
may give, path parameters, the runtime's parts, and the audit notes of a call."""

from __future__ import annotations

from typing import Any

from fastapi import Path, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from sandstack.runtime.errors import ApiError
from sandstack.runtime.models import SANDBOX_PATTERN, SESSION_PATTERN, Error, pattern
from sandstack.runtime.service import Runtime
from sandstack.runtime.session_keys import shown
from sandstack.runtime.store import SandboxRow
from sandstack.runtime.tokens import Scope, check_sandbox

ACTOR_HEADER = "X-Sandstack-Actor"  # who the caller acts for (a user, an agent run): recorded, not trusted
bearer = HTTPBearer(auto_error=False, description="The host's runtime token, a scoped token of some of its pools "
                                                  "(Pulumi secrets), or a session's own token (a claim's answer).")
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": Error}
                                           for code in (400, 401, 403, 404, 409, 413, 422, 429, 502, 503, 504, 507)}
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
    """What the audit line of this call names (a session by the id its scope gave it)."""
    if session is not None:
        request.state.session = shown(session)
    if sandbox is not None:
        request.state.sandbox = sandbox


async def require_token(request: Request, credentials: HTTPAuthorizationCredentials | None = Security(bearer)) -> None:
    # async: it never blocks, so it runs on the event loop; a plain function was a hop through the thread pool (and
    # back) on every call, before the route's own.
    given = credentials.credentials if credentials and credentials.scheme.lower() == "bearer" else ""
    scope = authenticate(request.app, given)
    if scope is None:
        raise ApiError(401, "unauthorized")
    request.state.scope = scope


def authenticate(app: Any, given: str) -> Scope | None:
    """The scope of a bearer token: a declared one (compared in constant time: sandstack.runtime.tokens), else a
    session's own (sandstack.runtime.session_tokens); None for any other."""
    scope = app.state.tokens.scope(given)
    runtime: Runtime | None = app.state.runtime
    if scope is None and runtime is not None:
        scope = runtime.session_tokens.scope(given)
    return scope


def scope_of(request: Request) -> Scope:
    return request.state.scope


def bound(request: Request, sandbox: str) -> Runtime:
    """The runtime, once the caller's token may act on `sandbox` (a scoped token: only its pools'; else 404)."""
    runtime = runtime_of(request)
    row = runtime.sandboxes.get(sandbox)
    check_sandbox(scope_of(request), row, runtime.host)
    note(request, sandbox=sandbox, session=row.session)
    request.state.pool = row.pool
    return runtime


def session_row(request: Request, session: str) -> SandboxRow:
    """The sandbox of the session the caller's token names `session` (sandstack.runtime.sessions.lookup: its own
    scope's; a session's token only its own session; else 404)."""
    note(request, session=session)
    row = runtime_of(request).sessions.lookup(scope_of(request), session)
    note(request, sandbox=row.name)
    return row
