"""On-demand places in the plan (docs/design/ondemand.md): the guard holds every place's limits, the runtime's
configuration carries the recipes and round-trips, and the runtime is deleted before what its sandboxes use. That
each recipe is the container the component would make: tests/differential/test_ondemand_recipe.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandstack.plan.recipe import difference, merge
from sandstack.plan.runtime import RuntimeConfig
from sandstack.plan.stack import plan_stack
from sandstack.spec import load_data
from testbed.specs import host, spec

RUNTIME = {"token": {"secret": "runtimeToken"}}
TEMPLATE = {"base_image": "busybox:1.36", "command": ["sleep", "infinity"],
            "limits": {"memory": "256MiB", "cpus": 0.5, "pids": 64},
            "lifecycle": {"max_lifetime": "1h", "idle_timeout": "10m"},
            "readiness": {"command": ["true"], "interval": "1s"},
            "filesystem": {"writable": [{"path": "/workspace", "size": "16MiB"},
                                        {"path": "/data", "type": "disk", "size": "32MiB"}]},
            "secrets": [{"secret": "apiToken", "path": "/run/secrets/token"}],
            "env": {"MODE": "agent"},
            "network": {"egress": "deny-all"}}


def _plan(tmp_path: Path, replicas: int, ceiling: int | None):
    pool = {"template": "t", "hosts": ["local"], "replicas": replicas, **({"max": ceiling} if ceiling else {})}
    data = spec({"t": TEMPLATE}, {"t": pool},
                hosts={"local": host(runtime=RUNTIME, disk_workspaces="1GiB")})
    return plan_stack(load_data(data, tmp_path), "t")


def test_the_guard_holds_every_slot_and_the_runtime_config_round_trips(tmp_path):
    plan = _plan(tmp_path, 1, 3).hosts["local"]
    names = [f"sandstack-t-t-{i}" for i in range(3)]
    assert [name for name, _ in plan.guard.pids] == names
    assert [line.split()[0] for line in plan.guard.lifecycle] == names
    assert [w.sandbox for w in plan.workspaces] == names  # Pulumi makes each place's disk workspace volume
    config = plan.runtime.config
    assert RuntimeConfig.from_json(config.to_json()) == config
    assert config.ondemand_labels == {"sandstack.stack": "t", "sandstack.host": "local"}


def test_no_ceiling_no_recipe(tmp_path):
    plan = _plan(tmp_path, 2, None).hosts["local"]
    assert plan.runtime.config.pools["t"].ondemand is None
    assert [name for name, _ in plan.guard.pids] == ["sandstack-t-t-0", "sandstack-t-t-1"]


def test_a_pool_of_no_warm_sandboxes_may_still_grow_on_demand(tmp_path):
    config = _plan(tmp_path, 0, 2).hosts["local"].runtime.config.pools["t"]
    assert (config.sandboxes, tuple(config.ondemand.places)) == ((), ("sandstack-t-t-0", "sandstack-t-t-1"))


@pytest.mark.parametrize(("base", "other"), [
    ({"a": 1, "b": {"c": [1], "d": "x"}}, {"a": 1, "b": {"c": [2], "d": "x"}}),
    ({"a": {"b": {"c": 1}}}, {"a": {"b": {"c": 1, "d": 2}}, "e": None}),
])
def test_merge_undoes_difference(base, other):
    assert merge(base, difference(base, other)) == other


def test_with_on_demand_the_runtime_is_deleted_first_and_given_time_to_remove_its_sandboxes(tmp_path):
    def runtime_node(plan):
        return next(n for n in plan.nodes.values() if n.inputs.get("name") == "sandstack-t_runtime")

    plan = _plan(tmp_path, 1, 3)
    node = runtime_node(plan)
    assert [plan.nodes[k].inputs["name"] for k in node.options.depends_on] == [
        "sandstack-t_guard", "sandstack-t-t", *(f"sandstack-t-t-{i}-ws0-32m" for i in range(3))]
    assert node.inputs.get("destroy_grace_seconds") == 120
    plain = runtime_node(_plan(tmp_path, 3, None))
    assert ([plan.nodes[k].inputs["name"] for k in plain.options.depends_on],
            plain.inputs.get("destroy_grace_seconds")) == (["sandstack-t_guard"], 120)  # a `max` added renews nothing
