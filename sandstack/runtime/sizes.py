"""Size classes at claim time (`pools.*.sizes`, docs/design/sizes.md).

A claim names a class of its pool (or none: the pool's own limits). A warm sandbox is resized in place with Docker's
container update (CPUs as NanoCpus, memory and memory+swap alike, the pids limit of its own cgroup: the host guard
holds the parent cgroup at the pool's largest pids), before the claim answers; its release (or any reset) gives it
the pool's own limits back. A sandbox's disk cannot change while it exists, so a class whose disk is not the pool's
is served only by an on-demand place, created with the class's limits. Every claim of a pool with classes holds its
sandbox to its limits (the pool's own included): a warm sandbox made by Pulumi has no pids limit of its own, so
without it a claim naming no class would run at the guard's largest. What the runtime last set on a container is
kept with its Docker Id (the store's `applied`), so the same limits on the same container are not set again.

A class the pool does not declare is a 422 naming the classes, answered before anything is taken.
"""

from __future__ import annotations

import json
from typing import Any

from sandstack.plan.recipe import merge
from sandstack.plan.runtime import PoolRuntime, SizeLimits
from sandstack.runtime.errors import ApiError
from sandstack.runtime.store import SandboxRow

NANO = 1_000_000_000


def wanted(spec: PoolRuntime, pool: str, size: str | None) -> SizeLimits | None:
    """The limits a claim of `size` gets in the pool; None when the pool has no classes and none is named. A class
    the pool does not declare: 422, naming the ones it does."""
    if spec.sizes is None:
        if size is None:
            return None
        raise ApiError(422, f"pool {pool!r} declares no size classes, so a claim of it names none (size {size!r} "
                            "given); its sandboxes have the pool's own limits", pool=pool, size=size, sizes=[])
    if size is None:
        return spec.sizes.default
    if size not in spec.sizes.classes:
        names = sorted(spec.sizes.classes)
        raise ApiError(422, f"pool {pool!r} has no size class {size!r}: its classes are {', '.join(names)} (or name "
                            "none for the pool's own limits)", pool=pool, size=size, sizes=names)
    return spec.sizes.classes[size]


def applied(container: str | None, body: dict[str, int]) -> str | None:
    """What the store keeps of limits the runtime set on a container (None: its Id is unknown, nothing kept)."""
    return f"{container} {json.dumps(body, sort_keys=True)}" if container else None


def needs_new_sandbox(spec: PoolRuntime, limits: SizeLimits | None) -> bool:
    """Whether only an on-demand place can have these limits: a running sandbox's disk cannot change."""
    return limits is not None and spec.sizes is not None and limits.disk != spec.sizes.default.disk


def update_body(limits: SizeLimits) -> dict[str, int]:
    """Docker's container update (`POST /containers/{id}/update`) that gives a sandbox these limits."""
    return {"NanoCpus": round(limits.cpus * NANO), "Memory": limits.memory, "MemorySwap": limits.memory,
            "PidsLimit": limits.pids}


def restore_body(spec: PoolRuntime, row: SandboxRow) -> dict[str, int] | None:
    """What gives a sandbox claimed at a class the pool's own limits back: the configuration's, or, when a reload
    removed the pool's classes while the session held it, those recorded at its claim. None: nothing to undo."""
    if row.size is None:
        return None
    if spec.sizes is not None:
        return update_body(spec.sizes.default)
    return json.loads(row.restore) if row.restore else None


def create_body(body: dict[str, Any], limits: SizeLimits | None) -> dict[str, Any]:
    """An on-demand place's create body with the class's limits (a writable root's size too, where it has one)."""
    if limits is None:
        return body
    host: dict[str, Any] = dict(update_body(limits))
    if "StorageOpt" in body.get("HostConfig", {}):
        host["StorageOpt"] = {**body["HostConfig"]["StorageOpt"], "size": str(limits.disk)}
    return merge(body, {"HostConfig": host})
