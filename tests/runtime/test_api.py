"""Auth, audit, errors without tracebacks, the committed OpenAPI document, and idle policies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastapi.testclient import TestClient

from sandstack.spec.models.base import NAME_PATTERN
from sandstack.runtime.openapi import PATH, REGENERATE, render_openapi
from tests.runtime.conftest import PY, hk, make_config, make_env

ROOT = Path(__file__).resolve().parents[2]


def test_a_wrong_or_missing_token_is_401_with_nothing_else(env):
    bare = TestClient(env.api.app)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic dGVzdA=="}):
        response = bare.post("/v1/sessions", json={"pool": "py", "session": "x"}, headers=headers)
        assert (response.status_code, response.json()) == (401, {"error": "unauthorized"})
        assert response.headers["www-authenticate"] == "Bearer"
    assert env.runtime.store.by_session(hk("x")) is None
    assert bare.get("/healthz").json() == {"status": "ok", "host": "local", "config": None}


def test_every_call_is_one_audit_line(env):
    name = env.claim("chat-1")["sandbox"]
    env.api.post(f"/v1/sandboxes/{name}/exec", json={"command": ["true"]}, headers={"X-Sandstack-Actor": "alice"})
    env.api.get("/v1/sandboxes/nope")
    TestClient(env.api.app).get("/v1/audit")
    lines = env.api.get("/v1/audit", params={"limit": 4}).json()
    assert [{k: line[k] for k in ("who", "session", "sandbox", "operation", "status", "outcome")}
            for line in lines] == [
        {"who": "testclient", "session": "chat-1", "sandbox": name, "operation": "claim", "status": 201,
         "outcome": "ok"},
        {"who": "alice@testclient", "session": "chat-1", "sandbox": name, "operation": "exec", "status": 200,
         "outcome": "ok"},
        {"who": "testclient", "session": None, "sandbox": "nope", "operation": "get_sandbox", "status": 404,
         "outcome": "sandbox 'nope' is not on host 'local'"},
        {"who": "testclient", "session": None, "sandbox": None, "operation": "audit", "status": 401,
         "outcome": "unauthorized"},
    ]
    # How long each call took to its answer: a number of ms, never absent (the exec ran a process).
    assert all(isinstance(line["ms"], float) and line["ms"] >= 0 for line in lines)
    assert lines[1]["ms"] > 0


def test_a_bug_answers_500_without_a_traceback(env):
    def broken(name):
        raise RuntimeError("secret internals at /srv/x.py line 3")

    env.backend.state = broken
    response = env.api.post("/v1/sessions", json={"pool": "py", "session": "x"})
    assert (response.status_code, response.json()) == (500, {"error": "internal error; see the runtime's log"})


def test_unknown_routes_and_bad_bodies_answer_json(env):
    assert env.api.get("/v1/nothing").json() == {"error": "Not Found"}
    response = env.api.post("/v1/sessions", json={"pool": "py"})
    assert (response.status_code, response.json()) == (422, {"error": "invalid request: body.session: Field required"})


def test_committed_openapi_document_is_current():
    committed = (ROOT / PATH).read_text(encoding="utf-8") if (ROOT / PATH).exists() else ""
    assert committed == render_openapi(), f"{PATH} is stale: run `{REGENERATE}` and commit the result"


def test_idle_pause_after_the_declared_time_without_api_or_cpu_activity(env):
    name = env.claim("chat-1")["sandbox"]
    bound_at = env.runtime.sandbox(name).last_activity
    env.runtime.monitor_once(now=bound_at + 10)  # first CPU sample
    env.backend.cpu[name] += 5 * 10**9  # 5 s of CPU in 10 s: busy
    env.runtime.monitor_once(now=bound_at + 20)
    assert env.runtime.sandbox(name).last_activity == bound_at + 20
    env.runtime.monitor_once(now=bound_at + 45)
    assert env.runtime.sandbox(name).status == "bound"  # 25 s idle < 30 s
    env.runtime.monitor_once(now=bound_at + 51)
    row = env.runtime.sandbox(name)
    assert (row.status, row.paused_by, env.backend.status[name]) == ("paused", "idle", "paused")


def test_idle_reset_ends_the_session_and_returns_the_sandbox(env):
    name = env.claim("w", pool="web")["sandbox"]
    since = env.runtime.sandbox(name).last_activity
    env.runtime.monitor_once(now=since + 1)  # first CPU sample: no rate yet, so not idle
    assert env.runtime.sandbox(name).status == "bound"
    env.runtime.monitor_once(now=since + 32)
    row = env.runtime.sandbox(name)
    assert (row.status, row.session, env.backend.starts[name]) == ("idle", None, 2)


def test_idle_stop_stops_the_container_and_the_next_claim_starts_it(tmp_path):
    from dataclasses import replace

    from sandstack.plan.runtime import IdlePolicy

    config = make_config()
    config = replace(config, pools={**config.pools, "py": replace(config.pools["py"], idle=IdlePolicy("stop", 5))})
    env = make_env(tmp_path, config)
    try:
        name = env.claim("chat-1")["sandbox"]
        since = env.runtime.sandbox(name).last_activity
        env.runtime.monitor_once(now=since + 1)  # first CPU sample
        env.runtime.monitor_once(now=since + 7)
        row = env.runtime.sandbox(name)
        assert (row.status, row.session, row.detail, env.backend.status[name]) == (
            "idle", None, "stopped after being idle", "exited")
        assert env.claim("chat-2")["sandbox"] == PY[0]
        assert env.backend.status[name] == "running"
    finally:
        env.backend.close()
        env.audit.close()


def test_the_openapi_document_needs_the_token(env):
    bare = TestClient(env.api.app)
    response = bare.get("/openapi.json")
    assert (response.status_code, response.json()) == (401, {"error": "unauthorized"})
    assert bare.get("/docs").status_code == 404
    served = env.api.get("/openapi.json")
    assert served.status_code == 200
    assert served.json() == json.loads(render_openapi())


def _refs(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def test_every_ref_in_the_openapi_document_resolves():
    document = json.loads(render_openapi())
    refs = set(_refs(document))
    assert "#/components/schemas/Entry" in refs
    for ref in refs:
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.removeprefix("#/components/schemas/") in document["components"]["schemas"], ref


def test_the_openapi_document_lists_every_answer_and_limit_the_server_gives():
    document = json.loads(render_openapi())
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            if path.startswith("/v1/"):
                assert {"400", "401", "422", "502", "503", "504"} <= set(operation["responses"]), (method, path)
    schemas = document["components"]["schemas"]
    claim = schemas["ClaimRequest"]["properties"]
    assert claim["pool"]["pattern"] == NAME_PATTERN  # the spec's own pool name rule
    assert claim["session"]["pattern"] == r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
    assert claim["from_snapshot"]["anyOf"][0]["pattern"] == r"^snap-[0-9a-f]{32}$"
    execute = schemas["ExecRequest"]["properties"]
    assert execute["timeout"]["anyOf"][0]["minimum"] == 1
    assert execute["command"]["anyOf"][0]["minItems"] == 1
    assert execute["env"]["additionalProperties"] is False
    assert list(execute["env"]["patternProperties"]) == [r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"]
    session = next(p for p in document["paths"]["/v1/sessions/{session}"]["get"]["parameters"]
                   if p["name"] == "session")
    assert session["schema"]["pattern"] == claim["session"]["pattern"]
    limit = document["paths"]["/v1/audit"]["get"]["parameters"][0]["schema"]
    assert (limit["minimum"], limit["maximum"]) == (1, 10000)


def test_the_generator_s_help_writes_nothing(tmp_path, monkeypatch, capsys):
    # `--help` (or any option it does not know) was taken for the root folder: it wrote `--help/docs/…`.
    from sandstack.runtime.openapi import main

    monkeypatch.chdir(tmp_path)
    for argv, code in ((["--help"], 0), (["--bogus"], 2)):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == code
    assert list(tmp_path.iterdir()) == []
    assert "usage: python -m sandstack.runtime.openapi" in capsys.readouterr().out
