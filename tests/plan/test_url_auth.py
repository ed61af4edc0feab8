"""`urls.auth: session` in the spec and the plan (docs/design/ingress.md, "Who may open a URL"): the rule that wants a
runtime and a url port, and the Caddyfile that asks the runtime before each request and keeps the visitor's token
from the app."""

from __future__ import annotations

import pytest

from sandstack.plan.runtime import ENV_WAKE_TOKEN
from sandstack.plan.stack import plan_stack
from sandstack.spec import SpecError, load_data
from testbed.specs import host, spec
from tests.plan.test_ingress_wake import INGRESS, RUNTIME, WEB


def _data(urls: dict | None, *, runtime: bool = True, ports: list | None = None, where: str = "template") -> dict:
    web = {**WEB, **({"ports": ports} if ports is not None else {})}
    if urls is not None and where == "template":
        web["urls"] = urls
    data = spec({"web": web}, {"web": {"template": "web", "hosts": ["local"], "replicas": 1, "max": 1}},
                hosts={"local": host(ingress=INGRESS, **({"runtime": RUNTIME} if runtime else {}))})
    if urls is not None and where == "defaults":
        data.setdefault("defaults", {})["urls"] = urls
    return data


def test_a_session_site_asks_the_runtime_first_and_the_app_never_sees_the_token(tmp_path):
    ingress = plan_stack(load_data(_data({"auth": "session"}), tmp_path), "t").hosts["local"].ingress
    text = ingress.caddyfile
    site = "https://8080-web-0.sbx.example.com {\n"
    block = text[text.index(site):].split("\n\thandle_errors {", 1)[0]
    assert block == (
        f"{site}"
        "\ttls internal\n"
        "\tforward_auth unix//run/sandstack/runtime/wake.sock {\n"
        "\t\turi /v1/url-auth?site={host}&sandbox=sandstack-t-web-0\n"
        f'\t\theader_up Authorization "Bearer {{env.{ENV_WAKE_TOKEN}}}"\n'
        "\t}\n"
        "\treverse_proxy sandstack-t-web-0:8080 {\n"
        "\t\theader_up -X-Sandstack-Token\n"
        '\t\theader_up Cookie "(^|;\\s*)sandstack_session=[^;]*" "$1"\n'
        "\t}")
    # After a wake the request is served by the sandbox the same way.
    assert text.count('header_up Cookie "(^|;\\s*)sandstack_session=[^;]*" "$1"') == 2


@pytest.mark.parametrize("where", ["template", "defaults"])
def test_by_default_or_with_none_a_site_is_as_before(tmp_path, where):
    for urls in (None, {"auth": "none"}):
        text = plan_stack(load_data(_data(urls, where=where), tmp_path), "t").hosts["local"].ingress.caddyfile
        assert "forward_auth" not in text and "sandstack_session" not in text
        assert "\ttls internal\n\treverse_proxy sandstack-t-web-0:8080\n" in text


def test_the_defaults_urls_apply_to_a_template_without_its_own(tmp_path):
    text = plan_stack(load_data(_data({"auth": "session"}, where="defaults"), tmp_path), "t").hosts["local"] \
        .ingress.caddyfile
    assert "forward_auth" in text


def test_without_a_runtime_on_the_pools_host_it_is_a_located_error(tmp_path):
    with pytest.raises(SpecError) as caught:
        load_data(_data({"auth": "session"}, runtime=False), tmp_path)
    [d] = [d for d in caught.value.diagnostics if d.rule == "url-auth"]
    assert (d.path, d.message) == ("$.pools.web.hosts", (
        "template 'web' asks for session tokens on its URLs (`templates.web.urls.auth: session`), but host(s) local "
        "of pool 'web' declare no runtime, which holds the session tokens the ingress checks; add `runtime` to them, "
        "or set `urls.auth: none`"))


def test_without_a_url_port_it_is_a_located_error(tmp_path):
    with pytest.raises(SpecError) as caught:
        load_data(_data({"auth": "session"}, ports=[{"port": 8080, "exposure": "host"}]), tmp_path)
    [d] = [d for d in caught.value.diagnostics if d.rule == "url-auth"]
    assert (d.path, d.message) == ("$.templates.web.urls.auth", (
        "template 'web' (pool 'web') asks for session tokens on its URLs, but has no port with `exposure: url`: "
        "nothing to guard; add a url port or remove `urls.auth`"))


def test_an_unknown_mode_is_refused_naming_the_allowed_ones(tmp_path):
    with pytest.raises(SpecError) as caught:
        load_data(_data({"auth": "password"}), tmp_path)
    text = str(caught.value)
    assert "templates.web.urls.auth" in text and "'none'" in text and "'session'" in text
