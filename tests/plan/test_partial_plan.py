"""A plan of some pools only (`plan_stack(..., only=...)`, what policy reads: one sandbox per template) holds the
very nodes the whole plan holds for those pools, and nothing of the others."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandstack.plan.stack import plan_stack
from sandstack.spec import load_stack

STACKS = sorted((Path(__file__).parents[2] / "stacks").glob("*.yaml"))


@pytest.mark.parametrize("path", STACKS, ids=lambda p: p.stem)
def test_a_plan_of_each_pools_first_host_has_the_whole_plans_nodes_for_them(path):
    spec = load_stack(path)
    only = {(name, pool.hosts[0]) for name, pool in spec.pools.items()}
    whole, part = plan_stack(spec, path.stem), plan_stack(spec, path.stem, only=only)
    assert {(p.pool, p.host) for p in part.pools.values()} == only
    assert len(whole.pools) > len(part.pools) or all(len(p.hosts) == 1 for p in spec.pools.values())
    for key, pool in part.pools.items():
        assert pool == whole.pools[key]
        for node in (key, *pool.sandboxes):
            assert part.nodes[node] == whole.nodes[node]
    # Every host's own nodes are planned (a pool's nodes refer to them), the other pools' are not.
    assert set(part.host_keys) == set(whole.host_keys)
    left_out = {key for key, pool in whole.pools.items() if key not in part.pools}
    assert not left_out & set(part.nodes)
