"""The declared sandboxes: each one's row in the store (status, session, detail), the transitions a request is making
on it now, the run of its container a bound session started on, and the end of a session on it (a reset, a
quarantine, a death while bound).

A sandbox moves idle → bound (claim) → [paused ↔ bound] → resetting → idle (release). One that stopped running
while bound is marked unhealthy, and the next monitor pass resets it. A reset that could not make it clean leaves
it quarantined, and the monitor tries again; one the host guard ended for good at a limit (on_expiry 'stop') is
expired. Neither is handed out. What else a session holds on a sandbox (its processes, its run-scoped secrets) is
owned by other parts, which register here to be told when a session ends (`on_session_end`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from contextlib import contextmanager
from typing import Callable, Iterator

from sandstack.plan.runtime import PoolRuntime
from sandstack.runtime.backend import (
    BackendError,
    ContainerState,
    DaemonUnavailable,
    SandboxBackend,
    SandboxGone,
    WorkspaceReset,
)
from sandstack.runtime import sizes
from sandstack.runtime.config import Live
from sandstack.runtime.errors import ApiError, conflict, not_found
from sandstack.runtime.interfaces import Leases
from sandstack.runtime.session_keys import shown
from sandstack.runtime.store import SandboxRow, Store

log = logging.getLogger("sandstack.runtime")
OUT_OF_SERVICE = ("quarantined", "expired", "unhealthy", "resetting")  # no session's, handed out to none


class Sandboxes:
    def __init__(self, live: Live, store: Store, backend: SandboxBackend, leases: Leases):
        self.live, self.store, self.backend, self.leases = live, store, backend, leases
        # Sandboxes a request is moving between states (restart, pause...): the monitor leaves them alone, or it
        # would read a half-done transition as a dead sandbox.
        self._busy: Counter[str] = Counter()
        self._lock = threading.Lock()
        # sandbox → Docker's StartedAt first seen while bound: a restart (a crash its restart policy undid) wiped
        # the session's processes and writable paths, though the container runs again.
        self._runs: dict[str, str] = {}
        self._session_end: list[Callable[[str], None]] = []

    @property
    def host(self) -> str:
        return self.live.host

    # Transitions

    def begin(self, name: str) -> None:
        """A transition of `name` begins (the monitor leaves it alone until `finish`)."""
        with self._lock:
            self._busy[name] += 1

    def finish(self, name: str) -> None:
        with self._lock:
            self._busy[name] -= 1
            if self._busy[name] <= 0:
                del self._busy[name]

    @contextmanager
    def transition(self, name: str) -> Iterator[None]:
        self.begin(name)
        try:
            yield
        finally:
            self.finish(name)

    def busy(self, name: str) -> bool:
        with self._lock:
            return name in self._busy

    # Runs of a bound sandbox's container

    def first_run(self, name: str, started_at: str) -> str:
        """The StartedAt this sandbox's session was first seen on (`started_at` when it is the first look)."""
        with self._lock:
            return self._runs.setdefault(name, started_at)

    def forget_run(self, name: str) -> None:
        """The runtime starts this container itself (a claim, a resume, a restore): that start is no crash's."""
        with self._lock:
            self._runs.pop(name, None)

    # Lookups: 404s that name what was not found

    def pool(self, name: str) -> PoolRuntime:
        """A pool of this host (a retired one's too, for its bound sessions: sandstack.runtime.config)."""
        spec = self.live.settings(name)
        if spec is None:
            raise not_found("pool", name, self.host)
        return spec

    def get(self, name: str) -> SandboxRow:
        row = self.store.sandbox(name)
        if row is None:
            raise not_found("sandbox", name, self.host)
        return row

    def of_session(self, session: str) -> SandboxRow:
        row = self.store.by_session(session)
        if row is None:
            raise not_found("session", shown(session) or "", self.host)
        return row

    def describe(self, row: SandboxRow, container: str | None = None) -> dict[str, object]:
        """`container`: Docker's status when the caller just learnt it (a claim: no second inspect)."""
        if container is None:
            try:
                container = self.backend.state(row.name).status
            except DaemonUnavailable:
                container = "unknown"
        # Never below 0: the monitor writes the time its pass began, which a test's pass (and a clock stepped back
        # on the host) may put after now.
        idle = None if row.last_activity is None else round(max(time.time() - row.last_activity, 0.0), 1)
        return {"sandbox": row.name, "pool": row.pool, "host": self.host, "status": row.status,
                "session": shown(row.session), "bound_at": row.bound_at, "from_snapshot": row.from_snapshot,
                "paused_by": row.paused_by, "idle_seconds": idle, "detail": row.detail, "container": container,
                "size": row.size}

    def expired(self, state: ContainerState) -> str | None:
        """Why the host guard ended this stopped container for good (its exit status says), or None."""
        if state.status != "exited" or state.exit_code is None:
            return None
        config = self.live.config
        limits = {code: limit for code, limit in ((config.exit_lifetime, "max lifetime"),
                                                  (config.exit_idle, "idle timeout")) if code is not None}
        limit = limits.get(state.exit_code)
        if limit is None:
            return None
        return (f"its {limit} was reached (exit {state.exit_code}) and on_expiry 'stop' keeps it stopped: it is "
                "not handed out again")

    def no_capacity(self, pool: str, declared: int) -> ApiError:
        """503, naming why each sandbox that is neither bound nor idle is out of service."""
        out = [row for row in self.store.sandboxes(pool) if row.status in OUT_OF_SERVICE]
        if not out:
            return ApiError(503, f"no capacity: every sandbox of pool {pool!r} on host {self.host!r} is in use "
                                 f"({declared} declared)", pool=pool, host=self.host)
        why = "; ".join(f"{row.name} is {row.status}" + (f" ({row.detail})" if row.detail else "") for row in out)
        return ApiError(503, f"no capacity: no sandbox of pool {pool!r} on host {self.host!r} is idle ({declared} "
                             f"declared, {len(out)} out of service: {why})", pool=pool, host=self.host,
                        out_of_service={row.name: row.status for row in out})

    # The end of a session

    def on_session_end(self, hook: Callable[[str], None]) -> None:
        """`hook(sandbox)` is called whenever a session on a sandbox ends (a reset, a retire), before the container
        is touched: a part that holds something of the session lets it go."""
        self._session_end.append(hook)

    def end_session(self, name: str) -> None:
        for hook in self._session_end:
            hook(name)

    def reset(self, name: str, *, start: bool = True, detail: str | None = None) -> None:
        """Fresh processes and writable paths, then back to the pool as idle (left stopped unless `start`)."""
        with self.transition(name):
            spec = self.pool(self.get(name).pool)
            self.end_session(name)
            state = self.backend.state(name)
            if state.status == "missing":
                raise SandboxGone(f"container {name!r} does not exist on this host")
            expired = self.expired(state)
            self.stop_and_empty(name, state)
            if spec.writable_root:  # what the session changed outside its writable paths (sandstack.runtime.rootfs)
                self.backend.reset_root(name)
            own = sizes.restore_body(spec, self.get(name))
            if own is not None:  # the session's class undone: the pool's own limits
                self.backend.resize(name, own)
                self.store.update(name, size=None, restore=None, applied=sizes.applied(state.container_id, own))
            if expired:
                self.store.update(name, status="expired", session=None, bound_at=None, from_snapshot=None,
                                  paused_by=None, last_activity=None, detail=expired)
                return
            if start:
                self.backend.start(name)
            self.store.update(name, status="idle", session=None, bound_at=None, from_snapshot=None, paused_by=None,
                              last_activity=None, detail=detail)

    def reset_quietly(self, name: str, *, start: bool = True, detail: str | None = None) -> None:
        try:
            self.reset(name, start=start, detail=detail)
        except BackendError as error:
            self.quarantine(name, error)

    def stop_and_empty(self, name: str, state: ContainerState) -> None:
        """The session's end on the container (a reset's, an on-demand retire's): stopped, disk workspaces emptied.
        Any failure raises: the caller quarantines the sandbox, never hands it out half clean. The caller has
        ended the session first (`end_session`), whatever the container's state."""
        if state.status == "paused":
            self.backend.unpause(name)
        # Stopped first: no process of the session runs on, or writes, while its files are removed.
        if state.status in ("running", "paused", "restarting"):
            self.backend.stop(name)
        # A start makes the tmpfs paths new; disk workspaces keep their files, so they are emptied (with the
        # rights a session's `chmod` cannot take away, and checked) and re-seeded.
        disk = [WorkspaceReset(w.path, w.keep, w.seed) for w in self.pool(self.get(name).pool).writable
                if w.kind == "disk"]
        if disk:
            self.backend.clean_workspaces(name, disk)

    def quarantine(self, name: str, error: BackendError) -> None:
        """Out of the pool until a reset succeeds (the monitor tries again at every pass)."""
        log.warning("sandbox %s quarantined: reset failed: %s", name, error)
        self.store.update(name, status="quarantined", session=None,
                          detail=f"reset failed, retried by the monitor: {error}")

    def died(self, row: SandboxRow, error: BackendError) -> ApiError:
        """A bound sandbox that stopped running: reported unhealthy; the monitor resets it. One found paused
        (by a pause this runtime did not make, such as `docker pause`) keeps its session: 409."""
        try:
            paused = self.backend.state(row.name).status == "paused"
        except DaemonUnavailable:
            paused = False
        if paused:
            return conflict(f"sandbox {row.name!r} is paused; resume it first "
                            f"(POST /v1/sandboxes/{row.name}/resume)", sandbox=row.name, status="paused")
        self.store.update(row.name, status="unhealthy", session=None,
                          detail=f"stopped running while bound to session {shown(row.session)!r}: {error}")
        return conflict(f"sandbox {row.name!r} stopped running; it is reported unhealthy and will be reset, "
                        f"and session {shown(row.session)!r} has ended", sandbox=row.name, status="unhealthy")

    # Pause

    def pause(self, name: str, by: str = "api") -> SandboxRow:
        row = self.get(name)
        if row.status == "paused":
            return row
        if row.status != "bound":
            raise conflict(f"sandbox {name!r} is {row.status}; only a bound sandbox can be paused",
                           sandbox=name, status=row.status)
        with self.leases.pause(name), self.transition(name):
            self.backend.pause(name)
            self.store.update(name, status="paused", paused_by=by)
        return self.get(name)

    def resume(self, name: str) -> SandboxRow:
        row = self.get(name)
        if row.status == "bound":
            return row
        if row.status != "paused":
            raise conflict(f"sandbox {name!r} is {row.status}; only a paused sandbox can be resumed",
                           sandbox=name, status=row.status)
        with self.transition(name):
            self.backend.unpause(name)
            self.store.update(name, status="bound", paused_by=None, last_activity=time.time())
        return self.get(name)
