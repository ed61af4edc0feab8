"""Session tokens (issue 37 item 1): a claim answers with a token for that session alone, shown once and stored
hashed; it acts on its own sandbox's routes and nothing else (404 for every other session, sandbox and snapshot,
403 for a pool's or the host's operations); it ends at release, when its binding ends, and at its lifetime; a
restarted runtime honours the live ones. Session ids are kept per token scope."""

from __future__ import annotations

import hashlib
import sqlite3

import pytest
from fastapi.testclient import TestClient

from sandstack.client import Forbidden, NotFound, Sandbox
from sandstack.runtime.app import create_app
from sandstack.runtime.service import DB_FILE
from sandstack.runtime.tokens import Tokens
from tests.runtime.conftest import PY, TOKEN, hk, make_env
from tests.runtime.served import serve

TENANT_A = "tenant-a-" + "4c1d" * 6
TENANT_B = "tenant-b-" + "7e2f" * 6


@pytest.fixture
def two(tmp_path):
    """Sessions s1 and s2 of pool py claimed by the host's token; (env, s1's claim, s2's claim)."""
    env = make_env(tmp_path)
    yield env, env.claim("s1"), env.claim("s2")
    env.backend.close()
    env.audit.close()


def bearer(env, token: str) -> TestClient:
    return TestClient(env.api.app, headers={"Authorization": f"Bearer {token}"})


def test_a_claim_answers_a_token_shown_once_and_stored_as_its_digest(two):
    env, s1, _ = two
    token = s1["token"]
    assert token.startswith("sst_") and len(token) > 40
    assert s1["token_expires_at"] > s1["bound_at"]
    again = env.api.post("/v1/sessions", json={"pool": "py", "session": "s1"})
    assert again.status_code == 200 and again.json()["token"] != token  # a new one each claim; the first still acts
    assert bearer(env, token).get("/v1/sessions/s1").json()["session"] == "s1"
    stored = b"".join(path.read_bytes() for path in env.state_dir.rglob("*") if path.is_file())
    assert token.encode() not in stored
    with sqlite3.connect(env.state_dir / DB_FILE) as db:
        digests = {row[0] for row in db.execute("SELECT digest FROM session_tokens")}
    assert hashlib.sha256(token.encode()).hexdigest() in digests
    assert env.api.get("/v1/sessions/s1").json().get("token") is None  # never shown again


def test_a_session_token_acts_on_its_own_sandbox(two):
    env, s1, _ = two
    mine, sandbox = bearer(env, s1["token"]), s1["sandbox"]
    assert mine.post(f"/v1/sandboxes/{sandbox}/exec", json={"command": ["echo", "hi"]}).json()["stdout"] == "hi\n"
    assert mine.put(f"/v1/sandboxes/{sandbox}/files/a.txt", content=b"A").status_code == 204
    assert mine.get(f"/v1/sandboxes/{sandbox}/files/a.txt").content == b"A"
    assert mine.get(f"/v1/sandboxes/{sandbox}/archive").status_code == 200
    process = mine.post(f"/v1/sandboxes/{sandbox}/processes", json={"command": ["cat"], "stdin": True}).json()
    assert [p["id"] for p in mine.get(f"/v1/sandboxes/{sandbox}/processes").json()] == [process["id"]]
    assert mine.post(f"/v1/sandboxes/{sandbox}/processes/{process['id']}/kill").status_code == 200
    snap = mine.post(f"/v1/sandboxes/{sandbox}/snapshots").json()["id"]
    assert [s["id"] for s in mine.get("/v1/snapshots").json()] == [snap]
    assert mine.post(f"/v1/sandboxes/{sandbox}/restore", json={"snapshot": snap}).status_code == 200
    assert mine.post(f"/v1/sandboxes/{sandbox}/pause").json()["status"] == "paused"
    assert mine.post("/v1/sessions/s1/resume").json()["status"] == "bound"
    assert mine.post("/v1/sessions/s1/hibernate").json()["status"] == "hibernated"
    assert mine.post("/v1/sessions/s1/resume").json()["status"] == "bound"
    assert mine.get(f"/v1/sandboxes/{sandbox}").json()["session"] == "s1"
    assert mine.delete(f"/v1/snapshots/{snap}").status_code == 204


def test_another_session_of_the_same_pool_does_not_exist_for_it_and_pool_operations_are_403(two):
    env, s1, s2 = two
    mine, other = bearer(env, s1["token"]), s2["sandbox"]
    snap = env.api.post(f"/v1/sandboxes/{other}/snapshots").json()["id"]
    process = env.api.post(f"/v1/sandboxes/{other}/processes", json={"command": ["cat"], "stdin": True}).json()["id"]
    before = (env.runtime.store.sandboxes(), env.runtime.store.snapshots())
    not_there = f"sandbox {other!r} is not on host 'local'"
    unknown = [
        ("get", f"/v1/sandboxes/{other}", None, not_there),
        ("post", f"/v1/sandboxes/{other}/exec", {"command": ["true"]}, not_there),
        ("get", f"/v1/sandboxes/{other}/files/x", None, not_there),
        ("put", f"/v1/sandboxes/{other}/files/x", None, not_there),
        ("delete", f"/v1/sandboxes/{other}/files/x", None, not_there),
        ("get", f"/v1/sandboxes/{other}/archive", None, not_there),
        ("get", f"/v1/sandboxes/{other}/processes", None, not_there),
        ("get", f"/v1/sandboxes/{other}/processes/{process}", None, not_there),
        ("post", f"/v1/sandboxes/{other}/processes/{process}/kill", None, not_there),
        ("get", f"/v1/sandboxes/{other}/processes/{process}/output?follow=false", None, not_there),
        ("post", f"/v1/sandboxes/{other}/processes", {"command": ["true"]}, not_there),
        ("post", f"/v1/sandboxes/{other}/watch", {"path": ""}, not_there),
        ("post", f"/v1/sandboxes/{other}/snapshots", None, not_there),
        ("post", f"/v1/sandboxes/{other}/restore", {"snapshot": snap}, not_there),
        ("post", f"/v1/sandboxes/{other}/pause", None, not_there),
        ("post", f"/v1/sandboxes/{other}/resume", None, not_there),
        ("get", "/v1/sessions/s2", None, "session 's2' is not on host 'local'"),
        ("post", "/v1/sessions/s2/hibernate", None, "session 's2' is not on host 'local'"),
        ("post", "/v1/sessions/s2/resume", None, "session 's2' is not on host 'local'"),
        ("get", f"/v1/snapshots/{snap}", None, f"snapshot {snap!r} is not on host 'local'"),
        ("delete", f"/v1/snapshots/{snap}", None, f"snapshot {snap!r} is not on host 'local'"),
        ("post", f"/v1/sandboxes/{s1['sandbox']}/restore", {"snapshot": snap}, f"snapshot {snap!r} is not on host 'local'"),
    ]
    for method, url, body, message in unknown:
        response = getattr(mine, method)(url, **({"json": body} if body is not None else {}))
        assert (response.status_code, response.json()["error"]) == (404, message), (method, url)
    pool_level = [
        ("post", "/v1/sessions", {"pool": "py", "session": "s3"}, "a claim"),
        ("post", "/v1/sessions", {"pool": "py", "session": "s1"}, "a claim"),
        ("delete", "/v1/sessions/s1", None, "a release"),
        ("get", "/v1/pools", None, "the pools' listing"),
        ("get", "/v1/sandboxes", None, "the sandboxes' listing"),
        ("get", "/v1/wake?site=x.example.com&sandbox=sandstack-x", None, "a wake"),
    ]
    for method, url, body, what in pool_level:
        response = getattr(mine, method)(url, **({"json": body} if body is not None else {}))
        assert (response.status_code, response.json()["error"]) == (403, (
            f"{what} is for the pool's or the host's token; the token of session 's1' acts only on its own "
            "sandbox")), (method, url)
    for url, what in (("/v1/audit", "the audit log"), ("/metrics", "the metrics")):
        response = mine.get(url)
        assert (response.status_code, response.json()["error"]) == (403, (
            f"{what} is for the host's token; the token of session 's1' acts only on its own sandbox"))
    assert mine.get("/v1/snapshots").json() == []
    assert mine.get("/v1/snapshots?session=s2").json() == []
    assert (env.runtime.store.sandboxes(), env.runtime.store.snapshots()) == before


def test_the_terminal_of_another_session_is_refused_like_any_route(two):
    env, s1, s2 = two
    with serve(env.api.app) as url:
        sandbox = Sandbox.connect(url, "s1", s1["token"], host="local")
        sandbox.name = s2["sandbox"]
        with pytest.raises(NotFound, match=f"sandbox {s2['sandbox']!r} is not on host 'local'"):
            with sandbox.terminal(command=["sh", "-i"]) as term:
                term.recv(timeout=10)


def test_it_ends_at_release_and_when_its_binding_ends_and_the_audit_names_its_scope(two):
    env, s1, s2 = two
    mine = bearer(env, s1["token"])
    assert mine.post(f"/v1/sandboxes/{s1['sandbox']}/exec", json={"command": ["true"]}).status_code == 200
    audit = env.audit.tail(1)[0]
    assert (audit["scope"], audit["session"]) == ("session:host/s1", "s1")
    assert s1["token"] not in (env.state_dir / "audit.log").read_text()
    assert env.api.delete("/v1/sessions/s1").status_code == 200
    assert mine.get("/v1/sessions/s1").status_code == 401
    assert env.runtime.session_tokens.count(hk("s1")) == 0
    env.claim("s1")  # the same id bound again (maybe the same sandbox): the old token stays dead
    assert mine.post(f"/v1/sandboxes/{s1['sandbox']}/exec", json={"command": ["true"]}).status_code == 401
    # s2's sandbox dies: the binding the token was given for is gone, the monitor drops it.
    theirs = bearer(env, s2["token"])
    env.backend.die(s2["sandbox"], 137)
    env.runtime.monitor_once()
    assert theirs.get(f"/v1/sandboxes/{s2['sandbox']}").status_code in (401, 404)
    assert env.runtime.session_tokens.count(hk("s2")) == 0


def test_it_ends_at_its_lifetime(two):
    env, _, _ = two
    tokens = env.runtime.session_tokens
    now = [tokens.clock()]
    tokens.clock = lambda: now[0]
    claimed = env.api.post("/v1/sessions", json={"pool": "py", "session": "short", "token_lifetime": 60}).json()
    assert claimed["token_expires_at"] == now[0] + 60
    mine = bearer(env, claimed["token"])
    assert mine.get("/v1/sessions/short").status_code == 200
    now[0] += 60
    assert mine.get("/v1/sessions/short").status_code == 401
    assert env.api.post("/v1/sessions", json={"pool": "py", "session": "x", "token_lifetime": 0}).status_code == 422


def test_a_restarted_runtime_honours_live_tokens_and_refuses_released_ones(two):
    env, s1, s2 = two
    assert env.api.delete("/v1/sessions/s2").status_code == 200
    again = env.restarted()
    assert bearer(again, s1["token"]).post(f"/v1/sandboxes/{s1['sandbox']}/exec",
                                           json={"command": ["echo", "on"]}).json()["stdout"] == "on\n"
    assert bearer(again, s2["token"]).get("/v1/sessions/s2").status_code == 401


def test_session_ids_are_each_scopes_own(tmp_path):
    """Tenant B's claim of an id tenant A holds binds B a sandbox of its own (it was a 404, which told B A's ids);
    each reaches its own by that id, the host's token names the scopes when both hold it."""
    env = make_env(tmp_path)
    tokens = Tokens(TOKEN, {"a": (TENANT_A, frozenset({"py"})), "b": (TENANT_B, frozenset({"py"}))})
    app = create_app(env.runtime, token=TOKEN, audit=env.audit, monitor=False, tokens=tokens)
    a = TestClient(app, headers={"Authorization": f"Bearer {TENANT_A}"})
    b = TestClient(app, headers={"Authorization": f"Bearer {TENANT_B}"})
    mine = a.post("/v1/sessions", json={"pool": "py", "session": "chat-1"})
    theirs = b.post("/v1/sessions", json={"pool": "py", "session": "chat-1"})
    assert (mine.status_code, theirs.status_code) == (201, 201)
    assert mine.json()["sandbox"] != theirs.json()["sandbox"]
    assert (mine.json()["session"], theirs.json()["session"]) == ("chat-1", "chat-1")
    assert a.get("/v1/sessions/chat-1").json()["sandbox"] == mine.json()["sandbox"]
    assert b.get("/v1/sessions/chat-1").json()["sandbox"] == theirs.json()["sandbox"]
    both = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}).get("/v1/sessions/chat-1")
    assert (both.status_code, both.json()["error"]) == (409, (
        "session id 'chat-1' is held by 2 token scopes (a, b) on this host: name its sandbox instead "
        "(GET /v1/sandboxes)"))
    assert b.delete("/v1/sessions/chat-1").status_code == 200
    assert a.get("/v1/sessions/chat-1").json()["status"] == "bound"
    assert sorted(r.session for r in env.runtime.store.sandboxes() if r.session) == ["a/chat-1"]
    env.backend.close()
    env.audit.close()


def test_the_client_claims_a_session_handle_and_a_sandbox_is_rebuilt_from_url_session_and_token(two):
    env, _, _ = two
    from sandstack.client import Client
    from tests.runtime.test_client_async import outputs

    with serve(env.api.app) as url, Client.from_outputs(outputs(url)) as client:
        claimed = client.claim("py", "agent-1")
        assert claimed.token and "token" not in claimed.info
        assert repr(claimed) == f"<Sandbox local/{claimed.name} session='agent-1'>"
        with Sandbox.connect(claimed.url, claimed.session, claimed.token, host="local") as agent:
            assert (agent.name, agent.session) == (claimed.name, "agent-1")
            assert agent.exec(["echo", "agent"]).stdout == "agent\n"
            with pytest.raises(Forbidden, match="a release is for the pool's or the host's token"):
                agent.release()
            other = env.claim("someone-else")["sandbox"]
            agent.name = other
            with pytest.raises(NotFound):
                agent.exec(["true"])
        assert claimed.status()["status"] == "bound"  # leaving the agent's block released nothing
        claimed.release()
        with pytest.raises(Exception) as refused:
            Sandbox.connect(claimed.url, claimed.session, claimed.token, host="local")
        assert refused.value.status == 401
    assert PY  # the fixture's pool


def test_the_async_sandbox_is_rebuilt_from_url_session_and_token_too(two):
    import asyncio

    from sandstack.client import AsyncSandbox

    env, s1, _ = two

    async def agent(url: str) -> tuple[str, str, int]:
        async with await AsyncSandbox.connect(url, "s1", s1["token"], host="local") as sandbox:
            result = await sandbox.exec(["echo", "async"])
            try:
                await sandbox.release()
            except Forbidden as refused:
                return sandbox.name, result.stdout, refused.status
        return sandbox.name, result.stdout, 0

    with serve(env.api.app) as url:
        assert asyncio.run(agent(url)) == (s1["sandbox"], "async\n", 403)
    assert env.api.get("/v1/sessions/s1").json()["status"] == "bound"
