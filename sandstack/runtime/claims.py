"""Binding a warm sandbox to a session without a Docker call under the store's lock (issue 22's concurrency goal).

A claim picks an idle sandbox of the pool from the store, asks Docker for its state with no lock held, then binds
it with a compare-and-set (the row still 'idle', the session still unbound: sandstack.runtime.store.update_if).
Each candidate is reserved in memory while its state is asked for, so concurrent claims check different sandboxes
(one runtime process per host: the reservation needs no more than this process); a claim that finds only
reserved candidates waits for those checks to end, since one may fail and leave its sandbox to this claim. A
candidate Docker reports dead is marked (unhealthy, or expired when the host guard ended it) only if it is still
idle, and the claim goes on to the next; so does one that lost the compare-and-set. A Docker failure raises before
anything was written: the claim answers 503 with nothing bound.
"""

from __future__ import annotations

import threading
import time
from sandstack.runtime.interfaces import Sandboxes, Taken

RESCAN_SECONDS = 0.5  # a claim waiting on others' checks looks again at least this often (rows change elsewhere)


class WarmClaims:
    def __init__(self, sandboxes: Sandboxes):
        self.sandboxes, self.store, self.backend = sandboxes, sandboxes.store, sandboxes.backend
        self._checking: set[str] = set()  # sandboxes a claim is asking Docker about now
        self._changed = threading.Condition()

    def take(self, pool: str, session: str, from_snapshot: str | None) -> Taken | None:
        """The session's sandbox (any pool: the caller checks), or an idle one of the pool bound to it now; None
        when no idle sandbox of the pool is usable."""
        store = self.store
        tried: set[str] = set()
        while True:
            existing = store.by_session(session)
            if existing:
                return Taken(existing, created=False)
            name = self._reserve(pool, tried)
            if name is None:
                return None
            tried.add(name)
            try:
                taken = self._bind(name, session, from_snapshot)
            finally:
                self._unreserve(name)
            if taken is not None:
                return taken

    def _bind(self, name: str, session: str, from_snapshot: str | None) -> Taken | None:
        store, sandboxes = self.store, self.sandboxes
        state = self.backend.state(name)  # no lock held; DaemonUnavailable: nothing was written
        idle = {"status": "idle", "session": None}
        why = sandboxes.expired(state)
        if why:  # ended for good by the host guard: a start would end at once (or run past its limit)
            store.update_if(name, idle, status="expired", detail=why)
            return None
        if not (state.running or state.status in ("exited", "created")):
            store.update_if(name, idle, status="unhealthy", detail=f"container is {state.status} while idle")
            return None
        with store.transaction() as db:
            existing = store.by_session(session)
            if existing:  # a concurrent claim of the same session bound one meanwhile
                return Taken(existing, created=False)
            sandboxes.begin(name)  # before the binding is visible: the monitor must not judge it yet
            now = time.time()
            try:
                bound = store.update_if(name, idle, db, status="bound", session=session, bound_at=now,
                                        from_snapshot=from_snapshot, paused_by=None, last_activity=now, detail=None)
            except BaseException:
                sandboxes.finish(name)
                raise
            if not bound:
                sandboxes.finish(name)  # changed since it was picked (the monitor judged it): the next one
                return None
            sandboxes.forget_run(name)
            row = store.sandbox(name)
        # stopped by an idle 'stop': started fresh
        return Taken(row, created=True, needs_start=not state.running, container=state.container_id)

    def reserved(self) -> set[str]:
        """The sandboxes claims are checking now."""
        with self._changed:
            return set(self._checking)

    def _reserve(self, pool: str, tried: set[str]) -> str | None:
        """An idle sandbox of the pool no other claim is checking, reserved; None when none is idle."""
        with self._changed:
            while True:
                idle = [name for name in self.store.idle(pool) if name not in tried]
                free = [name for name in idle if name not in self._checking]
                if free:
                    self._checking.add(free[0])
                    return free[0]
                if not idle:
                    return None
                self._changed.wait(RESCAN_SECONDS)  # others check the last idle ones: one may fail and free it

    def _unreserve(self, name: str) -> None:
        with self._changed:
            self._checking.discard(name)
            self._changed.notify_all()
