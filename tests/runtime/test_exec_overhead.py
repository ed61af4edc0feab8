"""What the runtime itself does per call, without Docker: API activity written to the store at most once per
TOUCH_EVERY (each write is a transaction committed to disk; an exec made two), and the token checked on the event
loop (no hop through the thread pool)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from sandstack.runtime import store as store_module
from sandstack.runtime.store import TOUCH_EVERY


def test_api_activity_is_written_at_most_once_per_touch_every_and_after_any_other_change_of_the_clock(env, monkeypatch):
    sandbox = env.claim("chat-1")["sandbox"]
    clock = SimpleNamespace(now=1000.0)
    monkeypatch.setattr(store_module, "time", SimpleNamespace(time=lambda: clock.now))
    written: list[float] = []
    update = env.runtime.store.update

    def recording(name, db=None, **fields):
        if "last_activity" in fields:
            written.append(fields["last_activity"])
        return update(name, db, **fields)

    monkeypatch.setattr(env.runtime.store, "update", recording)

    def exec_true() -> None:
        response = env.api.post(f"/v1/sandboxes/{sandbox}/exec", json={"command": ["true"]})
        assert (response.status_code, response.json()["exit_code"]) == (200, 0)

    exec_true()  # its start and its end: one write (was two)
    clock.now += TOUCH_EVERY / 2
    exec_true()  # within TOUCH_EVERY of the last: none
    assert (written, env.runtime.sandbox(sandbox).last_activity) == ([1000.0], 1000.0)
    clock.now += TOUCH_EVERY
    exec_true()
    assert written == [1000.0, 1000.0 + 1.5 * TOUCH_EVERY]
    env.runtime.store.update(sandbox, last_activity=5.0)  # another change of the clock (the monitor's, a resume)
    exec_true()  # written again, however recent the last touch
    assert written[2:] == [5.0, 1000.0 + 1.5 * TOUCH_EVERY]
    assert env.runtime.sandbox(sandbox).last_activity == 1000.0 + 1.5 * TOUCH_EVERY


def test_the_token_is_checked_on_the_event_loop(env, monkeypatch):
    on_loop: list[bool] = []
    scope = env.api.app.state.tokens.scope

    def checking(given):
        try:
            asyncio.get_running_loop()  # only the event loop's own thread has one
            on_loop.append(True)
        except RuntimeError:  # a worker thread of the pool
            on_loop.append(False)
        return scope(given)

    monkeypatch.setattr(env.api.app.state.tokens, "scope", checking)
    assert env.api.get("/v1/pools").status_code == 200
    assert on_loop == [True]


def test_calls_are_audited_by_plain_asgi_middleware_with_a_bug_answered_500_and_audited(env, caplog):
    from starlette.middleware.base import BaseHTTPMiddleware

    # Starlette's BaseHTTPMiddleware ran every route in a task of its own behind memory streams.
    assert [m.cls for m in env.api.app.user_middleware if m.cls is BaseHTTPMiddleware] == []

    def broken(name):
        raise RuntimeError("secret internals at /srv/x.py line 3")

    env.backend.state = broken
    response = env.api.post("/v1/sessions", json={"pool": "py", "session": "x"})
    assert (response.status_code, response.json()) == (500, {"error": "internal error; see the runtime's log"})
    assert "secret internals" not in response.text
    assert "unhandled error in POST /v1/sessions" in caplog.text  # logged with its traceback on this side
    last = env.audit.tail(1)[0]
    assert {k: last[k] for k in ("operation", "status", "outcome")} == {
        "operation": "claim", "status": 500, "outcome": "internal error"}
