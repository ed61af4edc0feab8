"""The route of pools: each pool on this host, its sandboxes by status, what its copies take of their storage."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Depends, Request

from sandstack.runtime.models import PoolStatus
from sandstack.runtime.routes.common import ERRORS, require_token, runtime_of, scope_of
from sandstack.runtime.tokens import pool_level

router = APIRouter(prefix="/v1", dependencies=[Depends(require_token)], responses=ERRORS)


@router.get("/pools", response_model=list[PoolStatus], operation_id="list_pools")
def list_pools(request: Request) -> Any:
    """Each pool on this host: its sandboxes by status, what its snapshots take of their storage, and its size
    classes."""
    pool_level(scope_of(request), "the pools' listing")
    runtime = runtime_of(request)
    answer = []
    for pool, spec in runtime.config.pools.items():
        if not scope_of(request).allows(pool):
            continue
        snapshots = runtime.store.snapshots(pool=pool)
        answer.append({"pool": pool, "host": runtime.host,
                       "sandboxes": dict(Counter(row.status for row in runtime.store.sandboxes(pool))),
                       "snapshots": len(snapshots), "snapshot_bytes": sum(snap.size for snap in snapshots),
                       "hibernated_bytes": runtime.storage.hibernated_bytes(pool),
                       "snapshot_storage": spec.snapshot_storage_bytes,
                       "session_snapshot_storage": spec.session_snapshot_storage_bytes,
                       "download_limit": spec.download_limit_bytes, "upload_limit": spec.upload_limit_bytes,
                       "sizes": {name: asdict(limits) for name, limits in spec.sizes.classes.items()}
                       if spec.sizes else {}})
    return answer
