"""What the runtime is told to create a pool's on-demand sandboxes from (docs/design/ondemand.md), as plain values.

The plan computes, for each place between the pool's warm count and its ceiling, the Docker Engine API's
`POST /containers/create` body of exactly the container the pool's component would make for that replica
(sandstack.plan.ondemand, from the same `plan_sandbox`); this keeps the places' common body once and, per place,
only what differs (its name, hostname, replica label, cgroup parent, workspace volumes...), so the configuration
stays small. The runtime ships this module with plan/runtime.py: it imports nothing but the standard library.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

LABEL_ONDEMAND = "sandstack.ondemand"  # on every on-demand container: what the runtime's reconcile finds
LABEL_RECIPE = "sandstack.recipe"  # the digest of its body: a changed pool's old containers are told apart


def merge(base: Any, override: Any) -> Any:
    """`override` laid over `base`, dict by dict; any other value (a list included) is replaced whole. A new value:
    nothing of either is shared with it."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = copy.deepcopy(base)
        for key, value in override.items():
            out[key] = merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    return copy.deepcopy(override)


def difference(base: Any, other: Any) -> Any:
    """What `merge(base, ·)` needs to give `other` (dicts compared key by key; only added or changed keys)."""
    if isinstance(base, dict) and isinstance(other, dict):
        if set(base) - set(other):
            raise ValueError(f"a place's body lacks {sorted(set(base) - set(other))}: places differ only in values")
        return {key: difference(base[key], value) if key in base and isinstance(value, dict) else value
                for key, value in other.items() if key not in base or base[key] != value}
    return other


@dataclass(frozen=True)
class OnDemand:
    """A pool's ceiling on this host and how to make each place above its warm sandboxes."""

    ceiling: int  # sandboxes of the pool on this host at most, warm ones included
    common: dict[str, Any]  # the create body all places share
    places: dict[str, dict[str, Any]] = field(default_factory=dict)  # container name → what differs from `common`
    wait_seconds: int = 120  # how long a creation may wait for the readiness probe (the plan's wait_timeout)
    # Sessions hibernated in these places at most (`max_hibernated`): the places past the ceiling are theirs, and
    # `ceiling` counts only the sandboxes running or being made. None: a hibernated one holds its place under it.
    hibernated: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.ceiling, bool) or not isinstance(self.ceiling, int) or self.ceiling < 1:
            raise ValueError(f"ondemand.ceiling: {self.ceiling!r} must be an integer >= 1")
        if self.hibernated is not None and (isinstance(self.hibernated, bool) or not isinstance(self.hibernated, int)
                                            or self.hibernated < 0):
            raise ValueError(f"ondemand.hibernated: {self.hibernated!r} must be an integer >= 0")
        if not self.places:
            raise ValueError("ondemand.places: a pool with an on-demand ceiling lists at least one place")

    def body(self, name: str) -> dict[str, Any]:
        return merge(self.common, self.places[name])


def ondemand_of(data: dict[str, Any] | None) -> OnDemand | None:
    return OnDemand(**data) if data else None
