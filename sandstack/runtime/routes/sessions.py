"""The routes of sessions: claim (`POST /v1/sessions`), read, release, hibernate and resume, by session id."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from sandstack.runtime.answers import AsciiJSON
from sandstack.runtime.credentials import check_names
from sandstack.runtime.models import ClaimAnswer, ClaimRequest, NetworkAnswer, NetworkRequest, SandboxStatus
from sandstack.runtime.profiles import Switch
from sandstack.runtime.session_keys import shown
from sandstack.runtime import ssh_keys
from sandstack.runtime.routes.common import ERRORS, note, require_token, runtime_of, scope_of, session_param, session_row
from sandstack.runtime.tokens import check_pool, check_snapshot, pool_level

router = APIRouter(prefix="/v1", dependencies=[Depends(require_token)], responses=ERRORS)


@router.post("/sessions", response_model=ClaimAnswer, status_code=201, operation_id="claim",
             responses={200: {"model": ClaimAnswer, "description": "The session already had this sandbox."}})
def claim(body: ClaimRequest, request: Request) -> Any:
    """Claim an idle sandbox of the pool for the session (idempotent), optionally starting from a snapshot. Session
    ids are the token scope's own: another scope's session of the same id is another session. The answer carries a
    new token for this session alone."""
    note(request, session=body.session)
    request.state.pool = body.pool
    runtime, scope = runtime_of(request), scope_of(request)
    pool_level(scope, "a claim")
    check_pool(scope, body.pool, runtime.host)
    if body.from_snapshot:
        check_snapshot(scope, body.from_snapshot, runtime.snapshots.find(body.from_snapshot, body.pool), runtime.host)
    check_names(body.secrets.env if body.secrets else {})  # before anything is bound
    keys = [ssh_keys.normal(k) for k in body.ssh_keys] if body.ssh_keys is not None else None  # so are the keys
    session = runtime.sessions.key_for(scope, body.session)
    row, created = runtime.sessions.claim(body.pool, session, body.from_snapshot, body.size)
    note(request, sandbox=row.name)
    if body.secrets is not None:
        request.state.secrets = runtime.sessions.give_secrets(row, session, body.secrets.env, body.secrets.files)
    if keys is not None:  # docs/design/ssh.md: the session's SSH logins by key
        runtime.ssh_keys.give(row, keys)
    token, expires = runtime.session_tokens.mint(row, body.token_lifetime)
    # A new binding's container was just found running (or started, or created and ready): not asked again.
    answer = runtime.sandboxes.describe(row, "running" if created else None)
    return AsciiJSON({**answer, "token": token, "token_expires_at": expires}, status_code=201 if created else 200)


@router.get("/sessions/{session}", response_model=SandboxStatus, operation_id="get_session")
def get_session(request: Request, session: str = session_param()) -> Any:
    return runtime_of(request).sandboxes.describe(session_row(request, session))


@router.delete("/sessions/{session}", response_model=SandboxStatus, operation_id="release")
def release(request: Request, session: str = session_param()) -> Any:
    """Release the session: its sandbox is reset (stopped, its disk workspaces emptied, started with fresh tmpfs
    paths) and returns to the pool; one whose reset fails is 'quarantined' (the answer's `detail` says why)."""
    pool_level(scope_of(request), "a release")
    row = session_row(request, session)
    runtime = runtime_of(request)
    return runtime.sandboxes.describe(runtime.sessions.release(row.session or ""))


@router.post("/sessions/{session}/hibernate", response_model=SandboxStatus, operation_id="hibernate")
def hibernate(request: Request, session: str = session_param()) -> Any:
    """Stop the session's sandbox and keep its files (tmpfs paths copied to the host, disk workspaces on their
    volumes): its memory and CPU are freed. Any later call for it, or POST .../resume, brings it back. 409 while
    a command or a transfer runs in it."""
    row = session_row(request, session)
    runtime = runtime_of(request)
    return runtime.sandboxes.describe(runtime.hibernation.hibernate(row.name))


@router.post("/sessions/{session}/resume", response_model=SandboxStatus, operation_id="resume_session")
def resume_session(request: Request, session: str = session_param()) -> Any:
    """Bring a hibernated (or paused) session's sandbox back: started, its files written back, ready."""
    row = session_row(request, session)
    runtime = runtime_of(request)
    return runtime.sandboxes.describe(runtime.hibernation.resume(row.name))


def _network(row, switch: Switch) -> dict[str, Any]:
    return {"session": shown(row.session or ""), "sandbox": row.name, "pool": switch.pool, "profile": switch.profile,
            "previous": switch.previous, "start": switch.start, "profiles": list(switch.profiles)}


@router.get("/sessions/{session}/network", response_model=NetworkAnswer, operation_id="get_network")
def get_network(request: Request, session: str = session_param()) -> Any:
    """The session's network profile in force, the one it starts in, and every profile its template declares."""
    row = session_row(request, session)
    request.state.pool = row.pool
    return _network(row, runtime_of(request).profiles.current(row.name, row.pool))


@router.post("/sessions/{session}/network", response_model=NetworkAnswer, operation_id="switch_network")
def switch_network(body: NetworkRequest, request: Request, session: str = session_param()) -> Any:
    """Switch the session's sandbox to another network profile its template declares, in place (no restart): the
    gateway applies it from the sandbox's next request (connections already open, such as an HTTPS tunnel, keep
    going). 422 names the declared profiles when this one is not among them; nothing changes then. Audited: who,
    when, from which profile to which."""
    row = session_row(request, session)
    request.state.pool = row.pool
    runtime = runtime_of(request)
    switch = runtime.profiles.switch(row.name, row.pool, body.profile)  # a refusal's audit line is its message
    request.state.outcome = f"network profile {switch.previous} -> {switch.profile}"
    return _network(row, switch)
