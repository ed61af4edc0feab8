"""Size classes in the plan (docs/design/sizes.md): the runtime's configuration carries each class resolved over the
pool's own limits and round-trips; the guard holds every place of the pool at its largest pids; a pool without
classes writes its configuration as before (no `sizes` key)."""

from __future__ import annotations

import json
from pathlib import Path

from sandstack.plan.runtime import RuntimeConfig, SizeLimits, Sizes
from sandstack.plan.stack import plan_stack
from sandstack.spec import load_data
from sandstack.spec.units import GIB, MIB
from testbed.specs import host, spec

TEMPLATE = {"base_image": "busybox:1.36", "command": ["sleep", "infinity"],
            "limits": {"memory": "256MiB", "cpus": 0.5, "pids": 64, "disk": "512MiB"},
            "network": {"egress": "deny-all"}}


def _host_plan(tmp_path: Path, sizes: dict | None, ceiling: int | None = None):
    pool = {"template": "t", "hosts": ["local"], "replicas": 2, **({"max": ceiling} if ceiling else {}),
            **({"sizes": sizes} if sizes is not None else {})}
    data = spec({"t": TEMPLATE}, {"t": pool}, hosts={"local": host(runtime={"token": {"secret": "runtimeToken"}})})
    return plan_stack(load_data(data, tmp_path), "t").hosts["local"]


def test_the_runtime_config_carries_each_class_over_the_pools_limits_and_round_trips(tmp_path):
    plan = _host_plan(tmp_path, {"large": {"cpus": 2, "memory": "1GiB", "pids": 512}, "lean": {"pids": 32}})
    config = plan.runtime.config
    default = SizeLimits(0.5, 256 * MIB, 512 * MIB, 64)
    assert config.pools["t"].sizes == Sizes(default, {"large": SizeLimits(2.0, GIB, 512 * MIB, 512),
                                                      "lean": SizeLimits(0.5, 256 * MIB, 512 * MIB, 32)})
    assert RuntimeConfig.from_json(config.to_json()) == config
    # The guard holds each sandbox's parent cgroup at the largest pids: a claim's own limit sits under it.
    assert plan.guard.pids == (("sandstack-t-t-0", 512), ("sandstack-t-t-1", 512))


def test_every_place_up_to_the_ceiling_is_held_at_the_largest_pids(tmp_path):
    plan = _host_plan(tmp_path, {"large": {"pids": 300}}, ceiling=3)
    assert [limit for _, limit in plan.guard.pids] == [300, 300, 300]


def test_a_pool_without_classes_writes_no_sizes_key(tmp_path):
    plan = _host_plan(tmp_path, None)
    assert plan.runtime.config.pools["t"].sizes is None
    assert "sizes" not in json.loads(plan.runtime.config.to_json())["pools"]["t"]
    assert plan.guard.pids == (("sandstack-t-t-0", 64), ("sandstack-t-t-1", 64))
