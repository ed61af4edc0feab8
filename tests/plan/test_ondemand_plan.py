"""On-demand slots in the plan (docs/design/ondemand.md): the runtime's recipe for each slot is the container the
pool's component would make for that replica, the guard holds every slot's limits, the ingress a site per slot,
and the runtime's configuration round-trips."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandstack.plan.recipe import LABEL_ONDEMAND, LABEL_RECIPE, difference, merge
from sandstack.plan.runtime import RuntimeConfig
from sandstack.plan.stack import plan_stack
from sandstack.plan.tree import Ref
from sandstack.spec import load_data
from testbed.provider.container_map import CONTAINER
from testbed.provider.schema import Ctx
from testbed.specs import changed, host, spec
from tests.differential.compare import MAPS, camel

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


def _wire(plan, value, in_map: bool = False):
    """A node's inputs as the provider gets them, each reference resolved to the named object's Docker name."""
    if isinstance(value, Ref):
        return plan.nodes[value.node].inputs["name"]
    if isinstance(value, dict):
        if in_map:
            return {k: _wire(plan, v) for k, v in value.items()}
        return {camel(k): _wire(plan, v, k in MAPS and isinstance(v, dict)) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_wire(plan, v) for v in value]
    return value


def _provider_body(plan, key: str) -> dict:
    translated, unknown = CONTAINER.translate(Ctx(CONTAINER.token, "urn", _wire(plan, dict(plan.nodes[key].inputs))))
    assert unknown == []
    body = translated.body()
    # The provider creates on the default bridge, disconnects it and connects the pool's network; the runtime
    # creates the container on that network at once.
    (network, _endpoint), = translated.endpoints
    body["HostConfig"]["NetworkMode"] = network
    return body


def test_each_slot_is_the_container_the_component_makes_for_that_replica(tmp_path):
    warm = _plan(tmp_path, 3, None)
    ondemand = _plan(tmp_path, 1, 3)
    config = ondemand.hosts["local"].runtime.config.pools["t"]
    assert config.sandboxes == ("sandstack-t-t-0",)
    assert config.ondemand.ceiling == 3 and tuple(config.ondemand.slots) == ("sandstack-t-t-1", "sandstack-t-t-2")
    for index in (1, 2):
        name = f"sandstack-t-t-{index}"
        mine = config.ondemand.body(name)
        assert mine.pop("NetworkingConfig") == {"EndpointsConfig": {"sandstack-t-t": {}}}
        labels = mine["Labels"]
        assert (labels.pop(LABEL_ONDEMAND), len(labels.pop(LABEL_RECIPE))) == ("true", 16)
        pool = next(iter(warm.pools.values()))
        assert mine["Image"] == warm.nodes[pool.image].inputs["name"]
        assert mine == _provider_body(warm, pool.sandboxes[index])


def test_the_guard_holds_every_slot_and_the_runtime_config_round_trips(tmp_path):
    plan = _plan(tmp_path, 1, 3).hosts["local"]
    names = [f"sandstack-t-t-{i}" for i in range(3)]
    assert [name for name, _ in plan.guard.pids] == names
    assert [line.split()[0] for line in plan.guard.lifecycle] == names
    assert [w.sandbox for w in plan.workspaces] == names  # Pulumi makes each slot's disk workspace volume
    config = plan.runtime.config
    assert RuntimeConfig.from_json(config.to_json()) == config
    assert config.ondemand_labels == {"sandstack.stack": "t", "sandstack.host": "local"}


def test_no_ceiling_no_recipe(tmp_path):
    plan = _plan(tmp_path, 2, None).hosts["local"]
    assert plan.runtime.config.pools["t"].ondemand is None
    assert [name for name, _ in plan.guard.pids] == ["sandstack-t-t-0", "sandstack-t-t-1"]


def test_a_pool_of_no_warm_sandboxes_may_still_grow_on_demand(tmp_path):
    config = _plan(tmp_path, 0, 2).hosts["local"].runtime.config.pools["t"]
    assert (config.sandboxes, tuple(config.ondemand.slots)) == ((), ("sandstack-t-t-0", "sandstack-t-t-1"))


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
            plain.inputs.get("destroy_grace_seconds")) == (["sandstack-t_guard"], None)
