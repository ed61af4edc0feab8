"""The diff decides each resource's action as the engine does (sandstack.review.actions): the provider table,
replace_on_changes, renewed references (delete-before-replace dependents), providers updated without a cascade,
components never diffed."""

from __future__ import annotations

import copy

from sandstack.plan.stack import plan_stack
from sandstack.review.actions import planned_actions
from sandstack.spec import load_data
from testbed.specs import spec

GATEWAY = "docker:index/container:Container::sandstack-local-gateway-container"
GUARD = "docker:index/container:Container::sandstack-local-guard-container"
NETWORK = "docker:index/network:Network::sandstack-local-net.p"


def _actions(tmp_path, base: dict, change) -> dict[str, str]:
    head = copy.deepcopy(base)
    change(head)
    plans = [plan_stack(load_data(d, tmp_path), "t") for d in (base, head)]
    return {k: a.action for k, a in planned_actions(*plans).items()}


BASE = spec({"p": {"base_image": "busybox:1.36", "network": {"egress": "allow-list", "allow": ["example.com"]}}})


def test_a_replaced_pool_network_replaces_the_gateway_that_joins_it(tmp_path):
    def subnet(d):
        d["hosts"]["local"]["subnet_pool"] = "10.77.0.0/16"
    actions = _actions(tmp_path, BASE, subnet)
    assert actions[NETWORK] == "replace" and actions[GATEWAY] == "replace"
    assert actions["docker:index/container:Container::sandstack-p.local-0"] == "replace"


def test_host_labels_replace_every_host_container_and_volume(tmp_path):
    def labels(d):
        d["hosts"]["local"]["labels"] = {"team": "agents"}
    actions = _actions(tmp_path, BASE, labels)
    assert actions[GUARD] == actions[GATEWAY] == "replace"
    assert actions["docker:index/volume:Volume::sandstack-local-guard-state"] == "replace"
    assert actions["docker:index/volume:Volume::sandstack-local-gateway-log"] == "replace"


def test_a_provider_change_is_an_update_with_no_cascade(tmp_path):
    def endpoint(d):
        d["hosts"]["local"]["endpoint"] = "unix:///run/other.sock"
    assert _actions(tmp_path, BASE, endpoint) == {"pulumi:providers:docker::sandstack-local-provider": "update"}


def test_memory_is_updated_in_place_and_components_are_never_diffed(tmp_path):
    def memory(d):
        d["templates"]["p"]["limits"] = {"memory": "768MiB"}
    assert _actions(tmp_path, BASE, memory) == {"docker:index/container:Container::sandstack-p.local-0": "update"}


def test_nothing_changed_nothing_to_do(tmp_path):
    assert _actions(tmp_path, BASE, lambda d: None) == {}



def test_a_row_the_engine_renews_through_a_replaced_network_gives_the_change_tables_cascade(tmp_path):
    """A url port turns the pool's network internal: the engine replaces the network delete-first, so the gateway that
    joins it is replaced too. The change table declares that cascade (sandstack.spec.changes.CASCADES): the row's
    reason is the field whose effect replaces the networks, and the legend says what that does to the gateway."""
    from sandstack.review.diff import diff
    from sandstack.review.diff_report import to_text
    from sandstack.spec import load_stack
    from sandstack.spec.changes import CASCADES, MEANING
    from testbed.specs import write_spec
    from tests.review.cases import FILES, pair

    for side, data in zip(("base", "head"), pair("port-url")):
        write_spec(tmp_path / side, data, FILES)
    result = diff(load_stack(tmp_path / "base" / "stack.yaml"), load_stack(tmp_path / "head" / "stack.yaml"), "prod")
    gateway = next(c for c in result.changes if c.resource.name == "sandstack-gpu-1-gateway-container")
    assert gateway.action == "replace"
    assert [(f.path, f.label) for f in gateway.reasons] == [
        ("templates.agent.ports.0.exposure",
         "url ports change, the network turns internal or routed: replace + networks + reload guard + reload ingress")]
    assert gateway.renewed_with == ("sandstack-gpu-1-net.agent",)
    assert gateway.to_json()["renewed_with"] == ["sandstack-gpu-1-net.agent"]
    text = to_text(result, "base.yaml", "head.yaml")
    assert "because it refers to" not in text
    assert f"networks: {MEANING['networks']}" in text and MEANING["networks"].endswith(CASCADES[0].words)
