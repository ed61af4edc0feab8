"""How the runtime answers: JSON that renders whatever string it holds, and every error as one sentence with
a status (sandstack.runtime.errors), never a traceback."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from sandstack.runtime.backend import BackendError, DaemonUnavailable
from sandstack.runtime.errors import ApiError
from sandstack.runtime.models import HINTS, NOT_UNICODE, RULES

CLIENT_CLOSED = 499  # nginx's 'client closed request': audited when the client left mid-request, never sent


class AsciiJSON(JSONResponse):
    """JSON with every non-ASCII character escaped: any str, even one holding a lone surrogate that UTF-8 cannot
    encode, renders (as a \\ud800 escape) instead of failing the response."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def error_response(status: int, message: str, /, **fields: Any) -> JSONResponse:
    return AsciiJSON({"error": message, **fields}, status_code=status,
                     headers={"WWW-Authenticate": "Bearer"} if status == 401 else None)


def install_errors(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> JSONResponse:
        request.state.outcome = error.message
        return error_response(error.status, error.message, **error.fields)

    @app.exception_handler(DaemonUnavailable)
    async def daemon_down(request: Request, error: DaemonUnavailable) -> JSONResponse:
        host = request.app.state.runtime.host if request.app.state.runtime else None
        message = f"the Docker daemon of host {host!r} does not answer; nothing was changed"
        request.state.outcome = message
        return error_response(503, message, host=host)

    @app.exception_handler(BackendError)
    async def backend_error(request: Request, error: BackendError) -> JSONResponse:
        request.state.outcome = str(error)
        return error_response(502, str(error))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = "; ".join(_problem(e) for e in error.errors())
        request.state.outcome = f"invalid request: {problems}"
        return error_response(422, f"invalid request: {problems}")

    @app.exception_handler(ClientDisconnect)
    async def client_left(request: Request, error: ClientDisconnect) -> JSONResponse:
        # Nobody reads this answer; the audit line says the client went away, not that the server failed.
        request.state.outcome = "client closed the request before its body was complete"
        return error_response(CLIENT_CLOSED, request.state.outcome)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        request.state.outcome = str(error.detail)
        return error_response(error.status_code, str(error.detail))


def _problem(error: dict[str, Any]) -> str:
    """One validation error: where, and what is allowed. A pattern with a hint names the bad value (no such
    pattern applies to a value that may be a secret); any other message never echoes the input."""
    where = ".".join(str(part) for part in error["loc"])
    regex = (error.get("ctx") or {}).get("pattern")
    value = error.get("input")
    if regex in HINTS and isinstance(value, str):
        return f"{where}: {value!r} must be {HINTS[regex]}"
    if regex in RULES:
        return f"{where}: {RULES[regex]}"
    # pydantic's own check of a surrogate ('string_unicode') or the models' (a 'value_error' with this text)
    unicode = error.get("type") == "string_unicode" or NOT_UNICODE in error["msg"]
    return f"{where}: {NOT_UNICODE}" if unicode else f"{where}: {error['msg']}"
