"""A URL's check (`GET /v1/url-auth`, sandstack/runtime/routes/url_auth.py) over the fake backend: what the ingress asks
before each request to a site of `urls.auth: session`. The session's own token passes (header, cookie, or a first
visit's query parameter swapped for a cookie); everything else gets one and the same 401."""

from __future__ import annotations

import pytest

from sandstack.spec.contract import URL_AUTH_COOKIE, URL_AUTH_HEADER
from tests.runtime.ondemand_helpers import PLACES, WARM
from tests.runtime.test_wake import SITE_PLACE, SITE_WARM, SITES, WAKE_TOKEN, woke  # noqa: F401  (the fixture)

REFUSED = {"error": "a session token for this site is required"}


def _check(ingress, site: str, uri: str = "/", sandbox: str | None = None, **headers):
    """The check as the ingress's Caddyfile asks it: the site and its sandbox (`sandbox` for one of no site)."""
    return ingress.get("/v1/url-auth", params={"site": site, "sandbox": sandbox or SITES[site]},
                       headers={"X-Forwarded-Uri": uri, **headers}, follow_redirects=False)


def test_the_sessions_own_token_passes_in_a_header_or_its_cookie_and_is_not_audited(woke):
    env, ingress = woke
    token = env.claim("a", pool="od")["token"]
    before = len(env.audit.tail(1000))
    assert _check(ingress, SITE_WARM, **{URL_AUTH_HEADER: token}).status_code == 204
    assert _check(ingress, SITE_WARM, Cookie=f"theme=dark; {URL_AUTH_COOKIE}={token}").status_code == 204
    assert len(env.audit.tail(1000)) == before  # a page's every asset passes here


def test_a_first_visits_token_in_the_url_is_swapped_for_a_cookie(woke):
    env, ingress = woke
    token = env.claim("a", pool="od")["token"]
    answer = _check(ingress, SITE_WARM, f"/editor/?folder=/work&sandstack_token={token}#top")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/editor/?folder=%2Fwork#top"
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{URL_AUTH_COOKIE}={token};")
    assert {"HttpOnly", "Secure", "SameSite=lax", "Path=/"} <= {part.strip() for part in cookie.split(";")}
    line = env.audit.tail(1)[0]
    assert (line["operation"], line["status"], line["session"], line["sandbox"]) == ("url_auth", 303, "a", WARM)
    assert token not in str(line)


@pytest.mark.parametrize("case", ["none", "other session", "released", "sandbox of no pool", "no session",
                                  "pool token as visitor", "malformed cookie"])
def test_anything_but_the_sites_sessions_token_gets_the_same_401(woke, case):
    env, ingress = woke
    mine = env.claim("a", pool="od")["token"]
    other = env.claim("b", pool="od")["token"]
    assert env.api.get("/v1/sessions/b").json()["sandbox"] == PLACES[0]
    site, headers, sandbox = SITE_WARM, {}, None
    if case == "other session":
        headers = {URL_AUTH_HEADER: other}
    elif case == "released":
        env.api.delete("/v1/sessions/a")
        headers = {URL_AUTH_HEADER: mine}
    elif case == "sandbox of no pool":
        site, sandbox, headers = "8080-x-0.sandbox.test", "sandstack-t-x-0", {URL_AUTH_HEADER: mine}
    elif case == "no session":
        env.api.delete("/v1/sessions/b")
        site, headers = SITE_PLACE, {URL_AUTH_HEADER: other}
    elif case == "pool token as visitor":
        headers = {URL_AUTH_HEADER: "engine-test-runtime-token"}
    elif case == "malformed cookie":
        headers = {"Cookie": f'{URL_AUTH_COOKIE}="{mine}'}
    answer = _check(ingress, site, sandbox=sandbox, **headers)
    assert (answer.status_code, answer.json()) == (401, REFUSED)
    line = env.audit.tail(1)[0]
    assert (line["operation"], line["status"], line["scope"]) == ("url_auth", 401, "ingress-wake")


def test_only_the_ingress_or_an_operator_may_ask(woke):
    env, _ = woke
    token = env.claim("a", pool="od")["token"]
    session = env.api.get("/v1/url-auth", params={"site": SITE_WARM, "sandbox": WARM}, headers={
        "Authorization": f"Bearer {token}", URL_AUTH_HEADER: token})
    assert session.status_code == 403  # a session's token does not vouch for itself
    assert env.api.get("/v1/url-auth", params={"site": SITE_WARM, "sandbox": WARM},
                       headers={URL_AUTH_HEADER: token}).status_code == 204  # the host's token
    assert WAKE_TOKEN
