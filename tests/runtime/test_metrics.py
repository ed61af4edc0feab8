"""The runtime's Prometheus endpoint and the Grafana dashboard that plots it (docs/runtime-dashboard.json)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "runtime-dashboard.json"
METRIC = re.compile(r"\b(sandstack_runtime_[a-z_]+)\b")


def samples(env) -> dict[tuple[str, tuple], float]:
    response = env.api.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.text) for s in family.samples}


def test_sandboxes_by_pool_and_status_claims_execs_and_errors_are_counted(env):
    sandbox = env.claim("s1")["sandbox"]
    assert env.api.post("/v1/sessions", json={"pool": "py", "session": "s1"}).status_code == 200
    assert env.api.post("/v1/sessions", json={"pool": "nope", "session": "s2"}).status_code == 404
    assert env.api.post(f"/v1/sandboxes/{sandbox}/exec", json={"command": ["true"]}).status_code == 200
    assert env.api.post(f"/v1/sandboxes/{sandbox}/exec", json={"command": ["sleep", "5"], "timeout": 1}).json()[
        "timed_out"]
    values = samples(env)
    assert values[("sandstack_runtime_sandboxes", (("pool", "py"), ("status", "bound")))] == 1
    assert values[("sandstack_runtime_sandboxes", (("pool", "py"), ("status", "idle")))] == 3
    assert values[("sandstack_runtime_sandboxes", (("pool", "web"), ("status", "quarantined")))] == 0
    assert values[("sandstack_runtime_claims_total", (("outcome", "bound"), ("pool", "py")))] == 1
    assert values[("sandstack_runtime_claims_total", (("outcome", "existing"), ("pool", "py")))] == 1
    assert values[("sandstack_runtime_claims_total", (("outcome", "refused"), ("pool", "(undeclared)")))] == 1
    assert values[("sandstack_runtime_claim_seconds_count", (("pool", "py"),))] == 1
    assert values[("sandstack_runtime_execs_total", (("outcome", "ok"), ("pool", "py")))] == 1
    assert values[("sandstack_runtime_execs_total", (("outcome", "timed_out"), ("pool", "py")))] == 1
    assert values[("sandstack_runtime_errors_total", (("kind", "not_found"), ("operation", "claim")))] == 1


def test_a_pool_the_host_does_not_declare_is_counted_under_one_label_and_adds_no_series(env):
    """Any token may name any pool in a claim: each name was a label value, two series kept for the runtime's life
    (1,000 claims took /metrics from 62 KB to 248 KB). Only declared pools label series; the rest share one."""
    def series() -> set[tuple[str, tuple]]:
        return set(samples(env))

    assert env.api.post("/v1/sessions", json={"pool": "nope-0", "session": "s0"}).status_code == 404
    before = series()
    for index in range(1, 200):
        assert env.api.post("/v1/sessions", json={"pool": f"nope-{index}", "session": f"s{index}"}).status_code == 404
    values = samples(env)
    assert set(values) == before
    assert values[("sandstack_runtime_claims_total", (("outcome", "refused"), ("pool", "(undeclared)")))] == 200
    pools = {dict(labels)["pool"] for _, labels in values if "pool" in dict(labels)}
    assert pools == {"py", "web", "(undeclared)"}


def test_the_on_demand_and_hibernation_hooks_feed_their_series(env):
    metrics = env.runtime.metrics  # what the service's own code calls
    assert metrics is env.api.app.state.metrics
    metrics.created("py", 0.4)
    metrics.created("py", None, ok=False)
    metrics.hibernated("web")
    metrics.resumed("web", 1.5)
    values = samples(env)
    assert values[("sandstack_runtime_ondemand_creations_total", (("outcome", "ok"), ("pool", "py")))] == 1
    assert values[("sandstack_runtime_ondemand_creations_total", (("outcome", "failed"), ("pool", "py")))] == 1
    assert values[("sandstack_runtime_ondemand_creation_seconds_sum", (("pool", "py"),))] == 0.4
    assert values[("sandstack_runtime_hibernations_total", (("pool", "web"),))] == 1
    assert values[("sandstack_runtime_resume_seconds_sum", (("pool", "web"),))] == 1.5


def test_metrics_need_the_token(env):
    response = env.api.get("/metrics", headers={"Authorization": "Bearer wrong-token-0123456789"})
    assert (response.status_code, response.json()) == (401, {"error": "unauthorized"})


def test_every_dashboard_panel_plots_a_metric_the_endpoint_serves(env):
    sandbox = env.claim("s1")["sandbox"]
    env.api.post(f"/v1/sandboxes/{sandbox}/exec", json={"command": ["true"]})
    env.api.post("/v1/sessions", json={"pool": "nope", "session": "s2"})
    env.api.post(f"/v1/sandboxes/{sandbox}/snapshots")
    env.api.app.state.metrics.created("py", 0.4)
    env.api.app.state.metrics.hibernated("py")
    env.api.app.state.metrics.resumed("py", 0.2)
    served = {name for name, _ in samples(env)}
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["panels"], "the dashboard has no panels"
    for panel in dashboard["panels"]:
        exprs = [target["expr"] for target in panel["targets"]]
        names = {name for expr in exprs for name in METRIC.findall(expr)}
        assert names, f"panel {panel['title']!r} plots no sandstack metric"
        assert names <= served, f"panel {panel['title']!r} plots {sorted(names - served)}, which /metrics does not serve"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_without_prometheus_client_the_runtime_serves_and_metrics_say_why(env, monkeypatch):
    from fastapi.testclient import TestClient

    from sandstack.runtime import metrics
    from sandstack.runtime.app import create_app
    from tests.runtime.conftest import TOKEN

    monkeypatch.setattr(metrics, "CollectorRegistry", None)
    app = create_app(env.runtime, token=TOKEN, audit=env.audit, monitor=False)
    api = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})
    assert api.post("/v1/sessions", json={"pool": "py", "session": "s1"}).status_code == 201
    response = api.get("/metrics")
    assert (response.status_code, response.json()) == (503, {
        "error": "metrics are not available: the runtime's Python has no prometheus_client (the infra image "
                 "installs python3-prometheus-client)"})
