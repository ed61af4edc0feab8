"""Each on-demand place's recipe (sandstack/plan/ondemand.py) is the Engine API body the provider would send for the
warm container of the same replica (the provider model, testbed/provider), field for field."""

from __future__ import annotations

from sandstack.plan.recipe import LABEL_ONDEMAND, LABEL_RECIPE
from sandstack.plan.tree import Ref
from testbed.provider.container_map import CONTAINER
from testbed.provider.schema import Ctx
from tests.differential.compare import MAPS, camel
from tests.plan.test_ondemand_plan import _plan


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
    assert config.ondemand.ceiling == 3 and tuple(config.ondemand.places) == ("sandstack-t-t-1", "sandstack-t-t-2")
    for index in (1, 2):
        name = f"sandstack-t-t-{index}"
        mine = config.ondemand.body(name)
        assert mine.pop("NetworkingConfig") == {"EndpointsConfig": {"sandstack-t-t": {}}}
        labels = mine["Labels"]
        assert (labels.pop(LABEL_ONDEMAND), len(labels.pop(LABEL_RECIPE))) == ("true", 16)
        pool = next(iter(warm.pools.values()))
        assert mine["Image"] == warm.nodes[pool.image].inputs["name"]
        assert mine == _provider_body(warm, pool.sandboxes[index])
