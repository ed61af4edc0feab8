"""When a network change rebuilds a template's snapshot because of its setup steps (the change table's condition
`setup steps, their gateway or resolver given or taken`, sandstack/review/reasons.py): whenever the build's arguments
change, its proxy or its resolver (sandstack.plan.snapshot.setup_build; docs/design/setup-policy.md)."""

from __future__ import annotations

import ipaddress

import pytest

from sandstack.plan.network import plan_pool_network
from sandstack.plan.snapshot import setup_build
from sandstack.review.reasons import DECIDE, Side
from sandstack.spec import changes as table
from sandstack.spec import load_stack
from testbed.specs import spec, write_spec

SETUP = {"version": "1", "setup": ["true"]}
UNLOGGED = {"egress": "allow-all", "log": False}
LOGGED_DIRECT = {"egress": "allow-all", "protocols": "any"}
THROUGH_GATEWAY = {"egress": "allow-list", "allow": ["example.org"]}


def _template(tmp_path, name: str, network: dict, setup: dict | None = SETUP):
    template = {"base_image": "busybox:1.36", "network": network, **({"snapshot": setup} if setup else {})}
    return load_stack(write_spec(tmp_path / name, spec({"agent": template}))).templates["agent"]


def _rebuilds(old, new) -> bool:
    side = Side(template=new, old=old, new=new, change=None, changed=frozenset())  # type: ignore[arg-type]
    return DECIDE[table.SETUP_GATEWAY](side)


def _args(template) -> dict:
    network = plan_pool_network("t", "agent", template, 30000, ipaddress.ip_network("10.213.240.0/24"))
    return setup_build(template, network).get("build_args", {})


@pytest.mark.parametrize("before, after, rebuilds", [
    # Direct both ways, no proxy either way: the logging resolver given or taken is the only difference.
    (UNLOGGED, LOGGED_DIRECT, True),
    (LOGGED_DIRECT, UNLOGGED, True),
    (LOGGED_DIRECT, THROUGH_GATEWAY, True),  # the proxy given
    (THROUGH_GATEWAY, {"egress": "allow-all"}, False),  # the same proxy and resolver
])
def test_the_snapshot_rebuilds_exactly_when_the_builds_arguments_change(tmp_path, before, after, rebuilds):
    old, new = _template(tmp_path, "old", before), _template(tmp_path, "new", after)
    assert (_args(old) != _args(new)) is rebuilds  # what the provider sees
    assert _rebuilds(old, new) is rebuilds  # what the review says


def test_without_setup_steps_nothing_is_rebuilt(tmp_path):
    old, new = _template(tmp_path, "old", UNLOGGED, None), _template(tmp_path, "new", LOGGED_DIRECT, None)
    assert (_args(old), _args(new), _rebuilds(old, new)) == ({}, {}, False)
