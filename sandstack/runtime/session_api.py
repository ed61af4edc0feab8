"""The routes of hibernation, by session: `POST /v1/sessions/{session}/hibernate` and `.../resume`
(sandstack.runtime.hibernate). Added to the app's token-guarded router by `add_routes`."""

from __future__ import annotations

from typing import Any, Callable

from fastapi import APIRouter, Path, Request

from sandstack.runtime.models import SESSION_PATTERN, SandboxStatus, pattern
from sandstack.runtime.routing import _scope
from sandstack.runtime.tokens import check_session


def add_routes(router: APIRouter, runtime_of: Callable[[Request], Any], note: Callable[..., None]) -> None:
    def session_path() -> Any:
        return Path(description="The session id.", **pattern(SESSION_PATTERN))

    @router.post("/sessions/{session}/hibernate", response_model=SandboxStatus, operation_id="hibernate")
    def hibernate(request: Request, session: str = session_path()) -> Any:
        """Stop the session's sandbox and keep its files (tmpfs paths copied to the host, disk workspaces on their
        volumes): its memory and CPU are freed. Any later call for it, or POST .../resume, brings it back. 409 while
        a command or a transfer runs in it."""
        note(request, session=session)
        runtime = runtime_of(request)
        row = runtime.session(session)
        check_session(_scope(request), session, row.pool, runtime.host)  # a scoped token: its pools' only (404)
        name = row.name
        note(request, sandbox=name)
        return runtime.describe(runtime.hibernation.hibernate(name))

    @router.post("/sessions/{session}/resume", response_model=SandboxStatus, operation_id="resume_session")
    def resume_session(request: Request, session: str = session_path()) -> Any:
        """Bring a hibernated (or paused) session's sandbox back: started, its files written back, ready."""
        note(request, session=session)
        runtime = runtime_of(request)
        row = runtime.session(session)
        check_session(_scope(request), session, row.pool, runtime.host)  # a scoped token: its pools' only (404)
        name = row.name
        note(request, sandbox=name)
        return runtime.describe(runtime.hibernation.resume(name))
