"""The ingress's wake of a site's sandbox (`GET /v1/wake`, sandstack/runtime/routes/wake.py) over the fake backend: the
ingress's token wakes a hibernated or paused session's sandbox and can do nothing else."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from sandstack.plan.runtime import ENV_WAKE_TOKEN, TokenScope
from sandstack.runtime.app import create_app
from sandstack.runtime.tokens import Tokens
from tests.runtime.conftest import TOKEN
from tests.runtime.ondemand_helpers import PLACES, WARM, od_config, od_env

WAKE_TOKEN = "ingress-wake-" + "5c1d" * 6
SITE_WARM = "8080-od-0.sandbox.test"
SITE_PLACE = "8080-od-1.sandbox.test"


SITES = {SITE_WARM: WARM, SITE_PLACE: PLACES[0], "8080-od-2.sandbox.test": PLACES[1]}


def _config():
    return od_config()


def _site(site: str) -> dict[str, str]:
    """A wake's query as the ingress's Caddyfile writes it: the site and its sandbox."""
    return {"site": site, "sandbox": SITES[site.lower()]}


@pytest.fixture
def woke(tmp_path):
    config = _config()
    env = od_env(tmp_path, config=config)
    tokens = Tokens.from_environment(TOKEN, config, {ENV_WAKE_TOKEN: WAKE_TOKEN})
    app = create_app(env.runtime, token=TOKEN, audit=env.audit, monitor=False, tokens=tokens)
    ingress = TestClient(app, headers={"Authorization": f"Bearer {WAKE_TOKEN}"})
    yield env, ingress
    env.backend.close()
    env.audit.close()


def test_the_ingress_wakes_a_hibernated_sandbox_of_a_site_files_and_all(woke):
    env, ingress = woke
    env.claim("a", pool="od")
    assert env.claim("b", pool="od")["sandbox"] == PLACES[0]
    env.api.put(f"/v1/sandboxes/{PLACES[0]}/files/notes.txt", content=b"kept")
    env.api.post("/v1/sessions/b/hibernate")
    answer = ingress.get("/v1/wake", params=_site(SITE_PLACE))
    assert (answer.status_code, answer.json()) == (200, {"site": SITE_PLACE, "status": "bound", "woke": True})
    assert env.api.get("/v1/sessions/b").json()["status"] == "bound"
    assert env.api.get(f"/v1/sandboxes/{PLACES[0]}/files/notes.txt").content == b"kept"
    # Again: nothing to do, the same answer but for `woke`.
    assert ingress.get("/v1/wake", params=_site(SITE_PLACE)).json() == {"site": SITE_PLACE, "status": "bound",
                                                                           "woke": False}
    line = env.audit.tail(1)[0]
    assert (line["operation"], line["scope"], line["sandbox"], line["session"]) == ("wake", "ingress-wake",
                                                                                    PLACES[0], "b")


def test_a_paused_sandbox_is_unpaused(woke):
    env, ingress = woke
    env.claim("a", pool="od")
    env.api.post(f"/v1/sandboxes/{WARM}/pause")
    answer = ingress.get("/v1/wake", params=_site(SITE_WARM.upper()))  # a Host header's case does not matter
    assert (answer.status_code, answer.json()["woke"]) == (200, True)
    assert env.backend.status[WARM] == "running"


def test_a_site_with_no_session_is_409_and_an_unknown_site_404_and_neither_changes_anything(woke):
    env, ingress = woke
    before = [(r.name, r.status, r.session) for r in env.runtime.store.sandboxes()]
    idle = ingress.get("/v1/wake", params=_site(SITE_WARM))
    assert (idle.status_code, idle.json()) == (409, {"error": f"site {SITE_WARM!r}: its sandbox has no session to "
                                                              "wake (idle)", "site": SITE_WARM, "status": "idle"})
    absent = ingress.get("/v1/wake", params=_site(SITE_PLACE))
    assert (absent.status_code, absent.json()["error"]) == (409, f"site {SITE_PLACE!r}: its sandbox has no session "
                                                                 "to wake (absent)")
    unknown = ingress.get("/v1/wake", params={"site": "8080-x-0.sandbox.test", "sandbox": "sandstack-t-x-0"})
    assert (unknown.status_code, unknown.json()) == (404, {"error": "site '8080-x-0.sandbox.test' is not on host "
                                                                    "'local'", "site": "8080-x-0.sandbox.test",
                                                           "host": "local"})
    bad = ingress.get("/v1/wake", params={"site": "no spaces/here", "sandbox": WARM})
    assert bad.status_code == 422
    unnamed = ingress.get("/v1/wake", params={"site": SITE_WARM})  # the ingress always names the sandbox
    assert unnamed.status_code == 422
    assert [(r.name, r.status, r.session) for r in env.runtime.store.sandboxes()] == before
    assert env.backend.provisioner.bodies == {}


def test_the_wake_token_can_do_nothing_else(woke):
    env, ingress = woke
    sandbox = env.claim("a", pool="od")["sandbox"]
    env.api.post("/v1/sessions/a/hibernate")
    before = [(r.name, r.status, r.session) for r in env.runtime.store.sandboxes()]
    refused = [
        ("post", "/v1/sessions", {"pool": "od", "session": "x"}, 404),
        ("get", "/v1/sessions/a", None, 404),
        ("delete", "/v1/sessions/a", None, 404),
        ("post", "/v1/sessions/a/resume", None, 404),
        ("get", f"/v1/sandboxes/{sandbox}", None, 404),
        ("post", f"/v1/sandboxes/{sandbox}/exec", {"command": ["true"]}, 404),
        ("get", f"/v1/sandboxes/{sandbox}/files/x", None, 404),
        ("get", "/v1/audit", None, 403),
        ("get", "/metrics", None, 403),
    ]
    for method, path, body, code in refused:
        response = getattr(ingress, method)(path, **({"json": body} if body is not None else {}))
        assert response.status_code == code, (method, path, response.text)
    assert ingress.get("/v1/pools").json() == []
    assert ingress.get("/v1/sandboxes").json() == []
    assert [(r.name, r.status, r.session) for r in env.runtime.store.sandboxes()] == before


def test_a_scoped_token_wakes_only_its_pools_sites_and_the_host_token_any(tmp_path):
    config = replace(_config(), tokens={"other": TokenScope((), "SANDSTACK_RUNTIME_TOKEN_OTHER")})
    env = od_env(tmp_path, config=config)
    other = "other-tenant-" + "77aa" * 6
    tokens = Tokens.from_environment(TOKEN, config, {"SANDSTACK_RUNTIME_TOKEN_OTHER": other})
    app = create_app(env.runtime, token=TOKEN, audit=env.audit, monitor=False, tokens=tokens)
    env.claim("a", pool="od")
    env.api.post("/v1/sessions/a/hibernate")
    tenant = TestClient(app, headers={"Authorization": f"Bearer {other}"})
    assert tenant.get("/v1/wake", params=_site(SITE_WARM)).status_code == 404
    assert env.runtime.store.sandbox(WARM).status == "hibernated"
    operator = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})
    assert operator.get("/v1/wake", params=_site(SITE_WARM)).json()["woke"] is True
    env.backend.close()
    env.audit.close()


@pytest.mark.parametrize(("environ", "message"), [
    ({ENV_WAKE_TOKEN: "short"}, f"{ENV_WAKE_TOKEN} must hold the ingress's token of at least 16 characters"),
    ({ENV_WAKE_TOKEN: TOKEN}, "the ingress's wake token is the same as scope 'host''s: give each its own"),
])
def test_a_bad_wake_token_is_refused_at_start_without_printing_it(environ, message):
    with pytest.raises(ValueError) as error:
        Tokens.from_environment(TOKEN, _config(), environ)
    assert str(error.value) == message
    assert TOKEN not in str(error.value)


def test_the_wake_token_is_taken_with_no_site_in_the_configuration(tmp_path):
    """The runtime's configuration names no sites (each wake names its sandbox): an ingress added to the host later
    finds the runtime taking its token already, with nothing of the runtime changed."""
    tokens = Tokens.from_environment(TOKEN, od_config(), {ENV_WAKE_TOKEN: WAKE_TOKEN})
    assert tokens.scope(WAKE_TOKEN).wake is True


def test_many_first_requests_at_once_make_one_wake_and_the_others_wait_on_it(woke):
    """60 first requests to a hibernated site's URL at once (issue 37: they waited up to 47 s on the engine): the
    ingress asks a wake for each; one resume brings the sandbox back (one container made), the others wait on it
    and answer as it did, none fails."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    env, ingress = woke
    env.claim("a", pool="od")
    assert env.claim("b", pool="od")["sandbox"] == PLACES[0]
    env.api.put(f"/v1/sandboxes/{PLACES[0]}/files/notes.txt", content=b"kept")
    env.api.post("/v1/sessions/b/hibernate")
    provisioner, made, started = env.backend.provisioner, [], threading.Event()
    create = provisioner.create

    def slow_create(name, body):  # a container's creation takes a while: the other wakes arrive meanwhile
        made.append(name)
        started.set()
        threading.Event().wait(0.3)
        create(name, body)
    provisioner.create = slow_create
    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(lambda _: ingress.get("/v1/wake", params=_site(SITE_PLACE)), range(60)))
    assert [a.status_code for a in answers] == [200] * 60, {a.text for a in answers if a.status_code != 200}
    assert sorted(a.json()["woke"] for a in answers) == [False] * 59 + [True]
    assert made == [PLACES[0]]
    assert env.api.get(f"/v1/sandboxes/{PLACES[0]}/files/notes.txt").content == b"kept"


def test_a_site_past_its_wakes_per_hour_is_refused_until_the_hour_has_passed(woke):
    env, ingress = woke
    env.runtime.reconfigure(replace(env.runtime.config, pools={
        name: replace(pool, wakes_per_hour=2) for name, pool in env.runtime.config.pools.items()}),
        "wakes-2")
    clock = [1000.0]
    ingress.app.state.wakes.clock = lambda: clock[0]
    env.claim("a", pool="od")
    for _ in range(2):
        env.api.post(f"/v1/sandboxes/{WARM}/pause")
        assert ingress.get("/v1/wake", params=_site(SITE_WARM)).json()["woke"] is True
    # A running sandbox's wake resumes nothing and counts nothing.
    assert ingress.get("/v1/wake", params=_site(SITE_WARM)).json()["woke"] is False
    env.api.post(f"/v1/sandboxes/{WARM}/pause")
    refused = ingress.get("/v1/wake", params=_site(SITE_WARM))
    assert (refused.status_code, refused.json()["error"]) == (
        429, f"site {SITE_WARM!r} woke its sandbox 2 times in the last hour (`session.wakes_per_hour`)")
    assert env.api.get("/v1/sessions/a").json()["status"] == "paused"  # nothing changed
    clock[0] += 3600
    assert ingress.get("/v1/wake", params=_site(SITE_WARM)).json()["woke"] is True
