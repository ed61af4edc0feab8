"""Run-scoped credentials: a claim's `secrets.env` reaches that session's execs only, is never stored or logged in
clear (the audit log names them), and is gone once the session ends."""

from __future__ import annotations

import json

from tests.runtime.conftest import hk

SECRET = "tok-" + "5f3a9c" * 6  # built here, so that finding it anywhere is the test's own planting


def _everything_stored(env) -> bytes:
    """Every byte the runtime keeps on its state volume: SQLite (and its WAL), the audit log, snapshots."""
    return b"".join(path.read_bytes() for path in sorted(env.state_dir.rglob("*")) if path.is_file())


def test_a_claims_secrets_reach_its_execs_and_nothing_stored(env):
    response = env.api.post("/v1/sessions", json={"pool": "web", "session": "run-1",
                                                  "secrets": {"env": {"API_TOKEN": SECRET, "OTHER": "x"}}})
    assert response.status_code == 201, response.text
    assert SECRET not in response.text
    sandbox = response.json()["sandbox"]
    out = env.api.post(f"/v1/sandboxes/{sandbox}/exec", json={"script": 'printf %s "$API_TOKEN"'}).json()
    assert out["stdout"] == SECRET
    # An exec's own env wins over a session secret of the same name (the caller chose it for that command).
    out = env.api.post(f"/v1/sandboxes/{sandbox}/exec",
                       json={"script": 'printf %s "$OTHER"', "env": {"OTHER": "mine"}}).json()
    assert out["stdout"] == "mine"
    lines = env.api.get("/v1/audit").json()
    claim = next(line for line in lines if line["operation"] == "claim")
    assert (claim["secrets"], claim["scope"]) == (["API_TOKEN", "OTHER"], "host")
    assert SECRET.encode() not in _everything_stored(env)
    assert SECRET not in json.dumps(lines)


def test_the_next_session_on_the_sandbox_sees_none_of_them(env):
    first = env.api.post("/v1/sessions", json={"pool": "web", "session": "run-1",
                                               "secrets": {"env": {"API_TOKEN": SECRET}}}).json()["sandbox"]
    assert env.api.delete("/v1/sessions/run-1").status_code == 200
    # The pool has one sandbox: the next session gets the same one, and the same session id again gets nothing.
    for session in ("run-2", "run-1"):
        again = env.claim(session, pool="web")["sandbox"]
        assert again == first
        out = env.api.post(f"/v1/sandboxes/{again}/exec", json={"script": 'printf %s "${API_TOKEN-unset}"'})
        assert out.json()["stdout"] == "unset"
        assert env.api.delete(f"/v1/sessions/{session}").status_code == 200
    assert env.runtime.credentials.names(first) == []


def test_an_idle_reset_drops_them_too(env):
    sandbox = env.api.post("/v1/sessions", json={"pool": "web", "session": "run-1",
                                                 "secrets": {"env": {"API_TOKEN": SECRET}}}).json()["sandbox"]
    env.runtime.sandboxes.reset(sandbox)  # what the monitor's idle 'reset' and a repair call
    assert env.runtime.credentials.env(sandbox, hk("run-1")) == {}


def test_a_claim_again_replaces_them_and_a_bad_one_changes_nothing(env):
    sandbox = env.api.post("/v1/sessions", json={"pool": "web", "session": "run-1",
                                                 "secrets": {"env": {"A": "1"}}}).json()["sandbox"]
    again = env.api.post("/v1/sessions", json={"pool": "web", "session": "run-1", "secrets": {"env": {"B": "2"}}})
    assert again.status_code == 200
    assert env.runtime.credentials.env(sandbox, hk("run-1")) == {"B": "2"}
    for secrets, message in [
        ({"env": {"1BAD": "x"}}, "invalid request: body.secrets.env.1BAD.[key]: '1BAD' must be letters, digits "
                                 "and '_', not starting with a digit, at most 128 characters"),
        ({"env": {"A": SECRET + "\0"}}, "invalid request: body.secrets.env.A: must not contain a NUL byte"),
        ({"files": {"../a": SECRET}}, "invalid request: body.secrets.files.../a.[key]: '../a' must be a file name: "
                                      "1-128 letters, digits or _.- starting with a letter, digit or '_'"),
        ({"files": {"a": SECRET + "\0"}}, "invalid request: body.secrets.files.a: must not contain a NUL byte"),
    ]:
        bad = env.api.post("/v1/sessions", json={"pool": "web", "session": "run-1", "secrets": secrets})
        assert (bad.status_code, bad.json()) == (422, {"error": message})
        assert SECRET not in bad.text
    assert env.runtime.credentials.env(sandbox, hk("run-1")) == {"B": "2"}
    # The marker of the runtime's own kill is not a name a session may set.
    marker = env.api.post("/v1/sessions", json={"pool": "web", "session": "run-1",
                                                "secrets": {"env": {"SANDSTACK_EXEC_ID": "x"}}})
    assert (marker.status_code, marker.json()["error"]) == (422, "secret names ['SANDSTACK_EXEC_ID'] are not "
                                                                 "allowed")
    assert env.runtime.credentials.env(sandbox, hk("run-1")) == {"B": "2"}
