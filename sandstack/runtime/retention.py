"""Snapshot retention per session (`session.session_snapshots`, `session_snapshot_max_age`): each session keeps
its newest `count` snapshots, none older than the age. The pool's own bound (`snapshots`, `snapshot_max_age`)
applies after it, over every session's; a snapshot a session took keeps its session id after the session
ended, so a released session's snapshots are still counted as its own."""

from __future__ import annotations

from typing import Callable

from sandstack.plan.runtime import RuntimeConfig
from sandstack.runtime.errors import conflict
from sandstack.runtime.session_keys import owner, shown
from sandstack.runtime.store import SnapshotRow, Store


def own_session(snap: SnapshotRow, session: str | None) -> None:
    """A sandbox restores its own session's snapshots; another session's is a branch (a claim's from_snapshot). A
    snapshot written before sessions were kept per scope (its session without one: sandstack.runtime.session_keys)
    is of the session of the same id on its pool's sandbox."""
    if snap.session is None or session is None:
        return
    legacy = owner(snap.session) is None and snap.session == shown(session)
    if snap.session != session and not legacy:
        raise conflict(f"snapshot {snap.id!r} is of session {shown(snap.session)!r}, not {shown(session)!r}: start a "
                       "session from it instead (POST /v1/sessions with from_snapshot)", snapshot=snap.id,
                       session=shown(session))


def per_session(config: RuntimeConfig, store: Store, now: float, delete: Callable[[str], bool]) -> list[str]:
    """Deletes, with `delete` (False: not deleted now), each session's snapshots past its pool's per-session bound;
    returns the ids it deleted."""
    removed: list[str] = []
    for pool, spec in config.pools.items():
        bound = spec.session_retention
        if bound is None:
            continue
        kept: dict[str | None, int] = {}
        for snap in store.snapshots(pool=pool):  # newest first
            if snap.session is None:
                continue
            kept[snap.session] = kept.get(snap.session, 0) + 1
            if kept[snap.session] > bound.count or now - snap.created_at > bound.max_age_seconds:
                if delete(snap.id):
                    removed.append(snap.id)
    return removed
