"""A pool's on-demand places as the runtime's recipe (sandstack.plan.recipe): for each replica between the pool's warm
count and its ceiling, the Engine API body of the container its component would make for that replica.

Each place is the `SandboxContainer` a warm replica would be (sandstack.plan.sandbox_container: the same
`plan_sandbox`, the same pool mounts), rendered as an Engine body instead of pulumi-docker inputs, with the objects
it refers to by their names (which the plan fixes) instead of Pulumi references: the snapshot image by its tag, the
pool network, the guard's state volume, the pool's secrets and data volumes, the place's disk workspace volumes
(Pulumi makes them with the warm ones', so the guard attaches their filesystems).
tests/differential/test_ondemand_recipe.py holds each body to what the provider model makes of the warm node's
inputs for the same replica.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sandstack.plan.network import PoolNetwork
from sandstack.plan.recipe import LABEL_ONDEMAND, LABEL_RECIPE, OnDemand, difference
from sandstack.plan.sandbox import plan_sandbox
from sandstack.plan.sandbox_container import SandboxContainer, engine_body, pool_mounts, sandbox_container
from sandstack.spec.models.hosts import Ingress
from sandstack.spec.resolve import ResolvedTemplate


def _recipe_body(container: SandboxContainer) -> dict[str, Any]:
    body = engine_body(container)
    # The recipe's own digest, without it: the runtime's reconcile tells a changed pool's containers apart by it.
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
    body["Labels"] = {**body["Labels"], LABEL_ONDEMAND: "true", LABEL_RECIPE: digest}
    return body


def plan_ondemand(*, stack: str, pool: str, host: str, template: ResolvedTemplate, replicas: int, ceiling: int,
                  network: PoolNetwork, digest: str, image: str, labels: dict[str, str], guard_state: str,
                  gpus: tuple[tuple[str, ...], ...] = (), ingress: Ingress | None = None,
                  hibernated: int | None = None) -> OnDemand | None:
    """The pool's recipe on one host, or None when its ceiling is its warm count. `hibernated` (`max_hibernated`):
    that many places more, past the ceiling, which then counts only the sandboxes running."""
    places_end = ceiling + (hibernated or 0)
    if places_end <= replicas:
        return None
    shared = pool_mounts(stack, pool, template, guard_state)
    plans = [plan_sandbox(stack=stack, pool=pool, host=host, template=template, index=i, network=network,
                          digest=digest, labels=labels, gpu_device_ids=gpus[i] if i < len(gpus) else (),
                          ingress=ingress) for i in range(replicas, places_end)]
    bodies = {p.name: _recipe_body(sandbox_container(p, image=image, network=network.name, shared=shared))
              for p in plans}
    first = next(iter(bodies.values()))
    # The digest label differs per place (names are in the body): kept per place, not shared.
    common = {key: value for key, value in first.items()
              if all(body.get(key) == value for body in bodies.values())}
    common = {**common, **{k: first[k] for k in first if k not in common and isinstance(first[k], dict)}}
    places = {name: difference(common, body) for name, body in bodies.items()}
    return OnDemand(ceiling=ceiling, common=common, places=places, wait_seconds=plans[0].wait_timeout or 60,
                    hibernated=hibernated)
