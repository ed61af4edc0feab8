"""The review decides every condition the change table declares (the markdown's size: tests/review/test_markdown.py)."""

from __future__ import annotations

import copy

import pytest

from sandstack.plan.changes import _all_effects
from sandstack.review.diff import diff
from sandstack.review.reasons import DECIDE
from sandstack.spec import load_stack
from sandstack.spec.models import Stack
from sandstack.spec.models.base import change_of
from sandstack.spec.walk import model_fields
from tests.review.cases import BASE, FILES, pair
from testbed.specs import write_spec


def test_every_declared_condition_is_decided_by_the_review():
    declared = {cond for info in model_fields(Stack).values() for e in _all_effects(change_of(info))
                for cond, _ in e.when}
    assert declared - set(DECIDE) == set(), "add the condition to sandstack.review.reasons.DECIDE"
    assert set(DECIDE) - declared == set(), "a condition the models no longer declare"


# --- a reason names the condition that held, at the path that set the value ---------------------------------

def _reasons_of(tmp_path, base: dict, head: dict) -> dict[str, list[str]]:
    """resource name → its reasons as `diff --format text` words them (`path: old → new [effect]`)."""
    a = load_stack(write_spec(tmp_path / "base", base, FILES))
    b = load_stack(write_spec(tmp_path / "head", head, FILES))
    return {c.resource.name: [r.text() for r in c.reasons] for c in diff(a, b, "prod").changes}


def test_a_reason_names_the_one_condition_that_held_not_every_branch(tmp_path):
    base, head = pair("port-url")
    reasons = _reasons_of(tmp_path, base, head)
    held = ("templates.agent.ports.0.exposure: host → url [url ports change, the network turns internal or "
            "routed: replace + networks + reload guard + reload ingress]")
    assert reasons["sandstack-gpu-1-guard-reload"][1:] == [held]
    assert held in reasons["sandstack-agent.gpu-1-0"]
    base, head = pair("limits-raised")
    # 1GiB → 4GiB: not under 256MiB, so the base effect (in-place) held, without the condition it did not meet.
    assert "templates.agent.limits.memory: 1GiB → 4GiB [in-place]" in \
        _reasons_of(tmp_path / "memory", base, head)["sandstack-agent.gpu-1-0"]


def test_a_condition_is_a_named_object_never_a_phrase():
    from sandstack.spec.changes import REPLACE, URL_PORTS, Effect
    with pytest.raises(ValueError, match="Condition objects"):
        Effect(when=(("url ports", REPLACE),))
    assert Effect(when=((URL_PORTS, REPLACE),)).under(URL_PORTS) is REPLACE


SHARED = {
    "profiles": {"small": {"cpus": 1, "pids": 100}},
    "defaults": {"base_image": "python:3.12-slim"},
    "templates": {
        "agent": {"limits": "small", "command": ["sleep", "infinity"]},
        "child": {"extends": "parent"},
        "parent": {"base_image": "busybox:1.36", "command": ["sleep", "infinity"], "limits": {"cpus": 1}},
    },
    "pools": {"agent": {"template": "agent", "hosts": ["gpu-1"]}, "child": {"template": "child", "hosts": ["gpu-1"]}},
}


def _shared(**changes: dict) -> dict:
    data = copy.deepcopy(BASE)
    data["templates"] = copy.deepcopy(SHARED["templates"])
    data["pools"] = copy.deepcopy(SHARED["pools"])
    data["profiles"] = copy.deepcopy(SHARED["profiles"])
    data["defaults"] = copy.deepcopy(SHARED["defaults"])
    for block, update in changes.items():
        key, _, field = block.partition("__")
        node = data[key]
        for part in field.split("__") if field else []:
            node = node[part]
        node.update(update)
    return data


def test_a_profile_named_by_a_template_s_limits_explains_what_its_change_renews(tmp_path):
    """`limits: small` sets none of the profile's fields itself: the profile's pids reach the guard (this said
    'reason not declared in the change table')."""
    reasons = _reasons_of(tmp_path, _shared(), _shared(profiles__small={"pids": 200}))
    assert reasons["sandstack-gpu-1-guard-reload"] == ["profiles.small.pids: 100 → 200 [reload guard]"]


def test_a_default_base_image_is_the_reason_at_its_own_path(tmp_path):
    """The default reaches the template that sets no image; it was reported as `templates.agent.base_image`, a
    path the spec does not have."""
    reasons = _reasons_of(tmp_path, _shared(), _shared(defaults={"base_image": "python:3.13-slim"}))
    because = "defaults.base_image: python:3.12-slim → python:3.13-slim [rebuild]"
    assert reasons["sandstack-agent.gpu-1-image"] == [because]
    assert reasons["sandstack-agent.gpu-1-0"] == [because]
    assert "sandstack-child.gpu-1-0" not in reasons  # its parent sets its own image


def test_a_parent_template_s_change_is_the_reason_for_its_children(tmp_path):
    reasons = _reasons_of(tmp_path, _shared(), _shared(templates__parent__limits={"cpus": 2}))
    assert reasons["sandstack-child.gpu-1-0"] == ["templates.parent.limits.cpus: 1 cpu → 2 cpus [replace]"]
