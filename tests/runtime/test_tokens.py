"""Scoped tokens (`hosts.*.runtime.tokens`): each acts only on its pools' sessions, sandboxes and snapshots; for
anything else it gets the 404 an unknown name gets; the host's token still acts on everything; the audit log
names the scope, never a token."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from sandstack.plan.runtime import RuntimeConfig, TokenScope, token_env
from sandstack.runtime.app import create_app
from sandstack.runtime.tokens import Tokens
from tests.runtime.conftest import PY, TOKEN, WEB, hk, make_config, make_env

WEB_TOKEN = "web-tenant-" + "9b7e" * 6


@pytest.fixture
def scoped(tmp_path):
    env = make_env(tmp_path)
    tokens = Tokens(TOKEN, {"web-tenant": (WEB_TOKEN, frozenset({"web"}))})
    app = create_app(env.runtime, token=TOKEN, audit=env.audit, monitor=False, tokens=tokens)
    tenant = TestClient(app, headers={"Authorization": f"Bearer {WEB_TOKEN}"})
    operator = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})
    yield env, tenant, operator
    env.backend.close()
    env.audit.close()


def test_a_scoped_token_acts_on_its_pool(scoped):
    env, tenant, _ = scoped
    claimed = tenant.post("/v1/sessions", json={"pool": "web", "session": "w1"})
    assert claimed.status_code == 201
    sandbox = claimed.json()["sandbox"]
    assert tenant.post(f"/v1/sandboxes/{sandbox}/exec", json={"command": ["true"]}).json()["exit_code"] == 0
    snap = tenant.post(f"/v1/sandboxes/{sandbox}/snapshots").json()["id"]
    assert tenant.get(f"/v1/snapshots/{snap}").status_code == 200
    assert [p["pool"] for p in tenant.get("/v1/pools").json()] == ["web"]
    assert [s["sandbox"] for s in tenant.get("/v1/sandboxes").json()] == WEB
    assert tenant.delete("/v1/sessions/w1").status_code == 200


def test_another_pools_sessions_sandboxes_and_snapshots_do_not_exist_for_it(scoped):
    env, tenant, operator = scoped
    sandbox = operator.post("/v1/sessions", json={"pool": "py", "session": "p1"}).json()["sandbox"]
    snap = operator.post(f"/v1/sandboxes/{sandbox}/snapshots").json()["id"]
    before = (env.runtime.store.sandboxes(), env.runtime.store.snapshots())
    unknown = [
        ("post", "/v1/sessions", {"pool": "py", "session": "p2"}, "pool 'py' is not on host 'local'"),
        ("post", "/v1/sessions", {"pool": "web", "session": "w9", "from_snapshot": snap},
         f"snapshot {snap!r} is not on host 'local'"),
        ("get", "/v1/sessions/p1", None, "session 'p1' is not on host 'local'"),
        ("delete", "/v1/sessions/p1", None, "session 'p1' is not on host 'local'"),
        ("get", f"/v1/sandboxes/{sandbox}", None, f"sandbox {sandbox!r} is not on host 'local'"),
        ("post", f"/v1/sandboxes/{sandbox}/exec", {"command": ["true"]}, f"sandbox {sandbox!r} is not on host 'local'"),
        ("get", f"/v1/sandboxes/{sandbox}/files/x", None, f"sandbox {sandbox!r} is not on host 'local'"),
        ("post", f"/v1/sandboxes/{sandbox}/snapshots", None, f"sandbox {sandbox!r} is not on host 'local'"),
        ("post", f"/v1/sandboxes/{sandbox}/pause", None, f"sandbox {sandbox!r} is not on host 'local'"),
        ("get", f"/v1/snapshots/{snap}", None, f"snapshot {snap!r} is not on host 'local'"),
        ("delete", f"/v1/snapshots/{snap}", None, f"snapshot {snap!r} is not on host 'local'"),
        ("get", "/v1/sandboxes?pool=py", None, "pool 'py' is not on host 'local'"),
        ("get", "/v1/snapshots?pool=py", None, "pool 'py' is not on host 'local'"),
    ]
    for method, url, body, message in unknown:
        response = getattr(tenant, method)(url, **({"json": body} if body is not None else {}))
        assert (response.status_code, response.json()["error"]) == (404, message), (method, url)
    # Its own sandbox restoring another pool's snapshot: as unknown to it as the snapshot's id.
    web = tenant.post("/v1/sessions", json={"pool": "web", "session": "w1"}).json()["sandbox"]
    response = tenant.post(f"/v1/sandboxes/{web}/restore", json={"snapshot": snap})
    assert (response.status_code, response.json()["error"]) == (404, f"snapshot {snap!r} is not on host 'local'")
    assert tenant.get("/v1/snapshots").json() == []
    assert (env.runtime.store.sandbox(sandbox), env.runtime.store.snapshots()) == (before[0][0], before[1])
    assert env.runtime.sandbox(sandbox).session == hk("p1")


def test_host_wide_reads_are_the_operators_and_the_audit_log_names_scopes_never_tokens(scoped):
    env, tenant, operator = scoped
    for url, what in (("/v1/audit", "the audit log"), ("/metrics", "the metrics"),
                      ("/openapi.json", "the API document")):
        response = tenant.get(url)
        assert (response.status_code, response.json()) == (403, {
            "error": f"{what} is for the host's token; token scope 'web-tenant' acts only on its pools' sessions and "
                     "snapshots", "scope": "web-tenant"})
        assert operator.get(url).status_code == 200
    tenant.post("/v1/sessions", json={"pool": "web", "session": "w1"})
    lines = operator.get("/v1/audit").json()
    assert [(line["operation"], line["scope"]) for line in lines if line["operation"] == "claim"] == [
        ("claim", "web-tenant")]
    text = (env.state_dir / "audit.log").read_text()
    assert WEB_TOKEN not in text and TOKEN not in text


def test_a_wrong_token_is_401(scoped):
    env, tenant, _ = scoped
    other = TestClient(tenant.app, headers={"Authorization": "Bearer " + WEB_TOKEN[:-1] + "x"})
    assert (other.get("/v1/pools").status_code, other.get("/v1/pools").json()) == (401, {"error": "unauthorized"})


def test_tokens_come_from_the_environment_and_errors_never_show_them():
    config = RuntimeConfig(host="local", pools=make_config().pools,
                           tokens={"web-tenant": TokenScope(("web",), token_env("web-tenant"))})
    assert token_env("web-tenant") == "SANDSTACK_RUNTIME_TOKEN_WEB_TENANT"
    tokens = Tokens.from_environment(TOKEN, config, {"SANDSTACK_RUNTIME_TOKEN_WEB_TENANT": WEB_TOKEN})
    assert tokens.scope(WEB_TOKEN).pools == frozenset({"web"})
    assert tokens.scope(TOKEN).operator
    for environ, message in [
        ({}, "SANDSTACK_RUNTIME_TOKEN_WEB_TENANT must hold scope 'web-tenant''s token of at least 16 characters"),
        ({"SANDSTACK_RUNTIME_TOKEN_WEB_TENANT": "short"},
         "SANDSTACK_RUNTIME_TOKEN_WEB_TENANT must hold scope 'web-tenant''s token of at least 16 characters"),
        ({"SANDSTACK_RUNTIME_TOKEN_WEB_TENANT": TOKEN},
         "scope 'web-tenant''s token is the same as scope 'host''s: give each its own"),
    ]:
        with pytest.raises(ValueError) as error:
            Tokens.from_environment(TOKEN, config, environ)
        assert str(error.value) == message
        assert TOKEN not in str(error.value)
    with pytest.raises(ValueError, match=r"tokens.t.pools: \['nope'\] are not pools of this host"):
        RuntimeConfig(host="local", pools=make_config().pools, tokens={"t": TokenScope(("nope",), "X")})
    assert RuntimeConfig.from_json(config.to_json()) == config
    assert PY and WEB  # the conftest's pools: py (4), web (1)


@pytest.mark.parametrize("name", ["host", "ingress-wake"])
def test_a_scope_named_as_the_hosts_or_the_ingresss_own_token_is_refused(name):
    """Session ids are kept per scope name (sandstack.runtime.session_keys) and the audit log names scopes: a scope
    named 'host' would share the host token's sessions."""
    config = make_config(tokens={name: TokenScope(("web",), "SANDSTACK_RUNTIME_TOKEN_X")})
    with pytest.raises(ValueError) as error:
        Tokens.from_environment(TOKEN, config, {"SANDSTACK_RUNTIME_TOKEN_X": "x" * 24})
    assert str(error.value).startswith(f"scope {name!r} has the name of the ")
    assert "x" * 24 not in str(error.value)
