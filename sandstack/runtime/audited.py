"""Every call's audit line and metrics, as plain ASGI middleware.

It was Starlette's `@app.middleware("http")` (BaseHTTPMiddleware), which runs the route in a task of its own and
passes the answer through memory streams: about as much of the runtime's own time per call as the rest of a short
exec's work (sandstack.runtime's issue 23 figures). What it records is unchanged: when the answer starts (its
status; a streamed body goes on after), the call's route, outcome, session, sandbox, scope and secrets' names from
the request's state; an exception before the answer started is logged with its traceback here and answered 500
without it.
"""

from __future__ import annotations

import logging
import time

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sandstack.runtime.answers import error_response
from sandstack.runtime.audit import AuditLog
from sandstack.runtime.routes.common import ACTOR_HEADER

log = logging.getLogger("sandstack.runtime")


class Audited:
    def __init__(self, app: ASGIApp, *, audit: AuditLog | None, metrics) -> None:
        self.app, self.audit, self.metrics = app, audit, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        request = Request(scope)
        answered = False

        async def sending(message: Message) -> None:
            nonlocal answered
            if message["type"] == "http.response.start" and not answered:
                answered = True
                self.record(request, message["status"], started)
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            if answered:
                raise  # the answer has begun: nothing else can be sent on it
            # A bug: logged here with its traceback, never sent.
            log.exception("unhandled error in %s %s", request.method, request.url.path)
            request.state.outcome = "internal error"
            await error_response(500, "internal error; see the runtime's log")(scope, receive, sending)

    def record(self, request: Request, status: int, started: float) -> None:
        if not request.url.path.startswith("/v1/"):
            return
        route = request.scope.get("route")
        operation = getattr(route, "name", None) or f"{request.method} {request.url.path}"
        took = time.monotonic() - started
        self.metrics.call(operation if route else "unrouted", status, took,
                          pool=getattr(request.state, "pool", None),
                          outcome=getattr(request.state, "exec_outcome", None))
        if self.audit is not None and not (getattr(request.state, "quiet", False) and status < 300):
            actor = request.headers.get(ACTOR_HEADER, "")[:64]
            peer = request.client.host if request.client else "-"
            scope = getattr(request.state, "scope", None)
            self.audit.record(who=f"{actor}@{peer}" if actor else peer, operation=operation,
                              outcome=getattr(request.state, "outcome", "ok"), status=status,
                              session=getattr(request.state, "session", None),
                              sandbox=getattr(request.state, "sandbox", None),
                              scope=scope.name if scope else None, secrets=getattr(request.state, "secrets", None),
                              ms=took * 1000)
