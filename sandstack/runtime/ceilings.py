"""A pool's two ceilings when it declares `max_hibernated` (docs/design/ondemand.md, "Hibernated sessions, counted
apart").

Without it a hibernated session holds its place under the pool's ceiling (`max`), so a claim at the ceiling is
refused though a hibernated sandbox uses no memory. With it the pool has `max_hibernated` more on-demand places,
and two counts are kept apart:

- **running**: the warm sandboxes (all of them, always: Pulumi keeps them, and a hibernated warm one comes back
  without asking for room) and the on-demand places neither absent nor hibernated (creating, bound, paused, being
  reset...). An on-demand claim, and the resume of a hibernated on-demand place, is refused when it would pass `max`.
- **hibernated**: the on-demand places hibernated. A hibernation of one past `max_hibernated` is refused, nothing
  stopped (not the oldest ended: a session's files are never dropped to make room). The runtime's own stop
  hibernates every bound on-demand sandbox whatever the count: its places and their disk are declared and reviewed,
  and ending sessions at a restart would lose their files.

Both counts read the store and, under one lock, what is under way (a resume or a hibernation not yet written), so
concurrent claims, resumes and hibernations never pass a ceiling together. The lock is taken before the store's.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

from sandstack.plan.runtime import PoolRuntime
from sandstack.runtime.errors import ApiError, conflict
from sandstack.runtime.store import Store

FREE = ("absent", "hibernated")  # an on-demand place in either holds no memory


class Ceilings:
    def __init__(self, store: Store):
        self.store = store
        self.lock = threading.RLock()
        self._resuming: set[str] = set()  # on-demand places being brought back (still 'hibernated' in the store)
        self._hibernating: set[str] = set()  # on-demand places being hibernated (still 'bound' in the store)

    @staticmethod
    def apart(spec: PoolRuntime) -> bool:
        """Whether the pool counts its hibernated sessions apart (`max_hibernated` declared)."""
        return spec.ondemand is not None and spec.ondemand.hibernated is not None

    def counts(self, pool: str, spec: PoolRuntime) -> tuple[int, int]:
        """(running, hibernated) of the pool on this host, what is under way included (see the module)."""
        with self.lock:
            rows = [row for row in self.store.sandboxes(pool) if row.name not in spec.sandboxes]
            running = len(spec.sandboxes) + sum(
                1 for row in rows if row.status not in FREE or (row.status == "hibernated"
                                                                and row.name in self._resuming))
            hibernated = sum(1 for row in rows if (row.status == "hibernated" and row.name not in self._resuming)
                             or (row.status not in FREE and row.name in self._hibernating))
            return running, hibernated

    def room_to_run(self, pool: str, spec: PoolRuntime) -> bool:
        """Whether one more sandbox of the pool may run (always, for a pool that does not count them apart). Call it
        with `lock` held up to the write that makes the new one count (a claim's 'creating')."""
        if not self.apart(spec):
            return True
        assert spec.ondemand is not None
        return self.counts(pool, spec)[0] < spec.ondemand.ceiling

    @contextmanager
    def resuming(self, name: str, pool: str, spec: PoolRuntime, host: str) -> Iterator[None]:
        """Room for a hibernated on-demand place to run again, held while it is brought back; 409 when the pool
        runs its ceiling (it stays hibernated, nothing changed)."""
        if not self.apart(spec) or name in spec.sandboxes:
            yield
            return
        assert spec.ondemand is not None
        with self.lock:
            running, _ = self.counts(pool, spec)
            if running >= spec.ondemand.ceiling:
                raise conflict(f"resuming sandbox {name!r}: pool {pool!r} on host {host!r} runs its ceiling of "
                               f"{spec.ondemand.ceiling} sandboxes (max), so it would pass it; it stays hibernated "
                               "with its files (release or hibernate another session of the pool, then resume)",
                               sandbox=name, pool=pool, host=host, ceiling=spec.ondemand.ceiling, status="hibernated")
            self._resuming.add(name)
        try:
            yield
        finally:
            with self.lock:
                self._resuming.discard(name)

    @contextmanager
    def hibernating(self, name: str, pool: str, spec: PoolRuntime, host: str, by: str) -> Iterator[None]:
        """A place among the pool's hibernated sessions, held while the copy is made; 409 past `max_hibernated`
        (nothing stopped). The runtime's own stop (`by='shutdown'`) is not bounded (see the module)."""
        if not self.apart(spec) or name in spec.sandboxes or by == "shutdown":
            yield
            return
        assert spec.ondemand is not None and spec.ondemand.hibernated is not None
        bound = spec.ondemand.hibernated
        with self.lock:
            _, hibernated = self.counts(pool, spec)
            if hibernated >= bound:
                raise conflict(f"hibernating sandbox {name!r}: pool {pool!r} on host {host!r} holds {hibernated} "
                               f"hibernated sessions, its ceiling (max_hibernated {bound}); it was not hibernated "
                               "(release or resume one of them first)", sandbox=name, pool=pool, host=host,
                               max_hibernated=bound)
            self._hibernating.add(name)
        try:
            yield
        finally:
            with self.lock:
                self._hibernating.discard(name)

    def at_ceiling(self, pool: str, spec: PoolRuntime, host: str, out: str, fields: dict[str, object]) -> ApiError:
        """A claim refused in a pool that counts its hibernated sessions apart: the running ceiling reached, or
        every place held (more hibernated than `max_hibernated`, which only the runtime's stop makes)."""
        assert spec.ondemand is not None and spec.ondemand.hibernated is not None
        ceiling, bound = spec.ondemand.ceiling, spec.ondemand.hibernated
        running, hibernated = self.counts(pool, spec)
        counted = dict(pool=pool, host=host, ceiling=ceiling, running=running, hibernated=hibernated,
                       max_hibernated=bound, **fields)
        if running >= ceiling:
            return ApiError(503, f"no capacity: pool {pool!r} on host {host!r} runs its ceiling of {ceiling} "
                                 f"sandboxes (max: {len(spec.sandboxes)} warm, the rest on demand), none idle; its "
                                 f"{hibernated} hibernated sessions hold no memory and are not counted "
                                 f"(max_hibernated {bound})" + out, **counted)
        return ApiError(503, f"no capacity: every place of pool {pool!r} on host {host!r} is held ({running} "
                             f"running of max {ceiling}, {hibernated} hibernated of max_hibernated {bound}), none "
                             "idle" + out, **counted)
