"""What every route module of the runtime's API shares: the bearer-token check, the error answers each route
may give, path parameters, and the audit notes of a call (app.py, process_routes.py, terminal.py, watch.py)."""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import Path, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from sandstack.runtime.errors import ApiError
from sandstack.runtime.models import SANDBOX_PATTERN, Error, pattern

ACTOR_HEADER = "X-Sandstack-Actor"  # who the caller acts for (a user, an agent run): recorded, not trusted
bearer = HTTPBearer(auto_error=False, description="The host's runtime token (a Pulumi secret).")
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": Error}
                                           for code in (400, 401, 403, 404, 409, 413, 422, 502, 503, 504, 507)}
BINARY = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}


def _path(description: str, regex: str) -> Any:
    return Path(description=description, **pattern(regex))


def _sandbox() -> Any:
    return _path("The sandbox's container name.", SANDBOX_PATTERN)


def _runtime(request: Request) -> Any:  # the app's sandstack.runtime.service.Runtime
    return request.app.state.runtime


def _note(request: Request, *, session: str | None = None, sandbox: str | None = None) -> None:
    """What the audit line of this call names."""
    if session is not None:
        request.state.session = session
    if sandbox is not None:
        request.state.sandbox = sandbox


def require_token(request: Request, credentials: HTTPAuthorizationCredentials | None = Security(bearer)) -> None:
    expected: str = request.app.state.token
    given = credentials.credentials if credentials and credentials.scheme.lower() == "bearer" else ""
    # Constant time: how much of a guess matched must not show in the response time.
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise ApiError(401, "unauthorized")


def _bound(request: Request, sandbox: str) -> Any:
    runtime = _runtime(request)
    _note(request, sandbox=sandbox, session=runtime.sandbox(sandbox).session)
    return runtime
