"""The runtime's behaviour, without HTTP: sessions bound to declared sandboxes, exec, pause and resume, and
the monitor that enforces idle policies and resets sandboxes that died (its pass: sandstack.runtime.monitor).

A sandbox moves idle → bound (claim) → [paused ↔ bound] → resetting → idle (release). One that stopped
running while bound is marked unhealthy, and the next monitor pass resets it. A reset that could not make it
clean leaves it quarantined, and the monitor tries again; one the host guard ended for good at a limit
(on_expiry 'stop') is expired. Neither is handed out. Every sandbox is one the spec declared and the config lists:
the warm ones, and the on-demand places up to a pool's ceiling, which sandstack.runtime.ondemand creates from the
plan's recipe (a reset's throwaway helper containers aside, docker_backend).
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sandstack.plan.runtime import PoolRuntime, RuntimeConfig
from sandstack.runtime import scripts
from sandstack.runtime.backend import (
    BackendError,
    CappedBuffer,
    ContainerState,
    DaemonUnavailable,
    SandboxBackend,
    SandboxGone,
    WorkspaceReset,
)
from sandstack.runtime.claims import WarmClaims
from sandstack.runtime.credentials import Credentials
from sandstack.runtime.errors import ApiError, conflict, not_found
from sandstack.runtime.hibernate import Hibernation
from sandstack.runtime.leases import Leases, holding
from sandstack.runtime.metrics import Metrics, NoMetrics
from sandstack.runtime.monitor import Monitor
from sandstack.runtime.ondemand import OUT_OF_SERVICE, OnDemandPlaces, provisioner_for
from sandstack.runtime.models import ENV_NAME_PATTERN, SESSION_HINT, SESSION_PATTERN
from sandstack.runtime.processes import Processes
from sandstack.runtime.store import SandboxRow, Store
from sandstack.runtime.workspace import Workspace

log = logging.getLogger("sandstack.runtime")

# fullmatch: a pattern's '$' lets Python's re take a trailing newline.
SESSION_ID = re.compile(SESSION_PATTERN.removeprefix("^").removesuffix("$"))


class Runtime(Monitor):
    def __init__(self, config: RuntimeConfig, backend: SandboxBackend, state_dir: Path):
        self.config = config
        self.host = config.host
        self.backend = backend
        self.state_dir = state_dir
        self.store = Store(state_dir / "runtime.sqlite3")
        self.store.sync_declared({pool: spec.places for pool, spec in config.pools.items()})
        self._cpu: dict[str, tuple[float, int]] = {}  # sandbox → (sampled at, CPU ns) for the idle check
        # sandbox → Docker's StartedAt first seen while bound: a restart (a crash its restart policy undid) wiped
        # the session's processes and writable paths, though the container runs again.
        self._started: dict[str, str] = {}
        # expired sandbox → the StartedAt of the run seen at the last pass: one running at two passes is new.
        self._expired_runs: dict[str, str | None] = {}
        # Sandboxes a request is moving between states (restart, pause...): the monitor leaves them alone, or
        # it would read a half-done transition as a dead sandbox.
        self._busy: Counter[str] = Counter()
        self._busy_lock = threading.Lock()
        self.leases = Leases()  # operations running in a sandbox vs. a pause of it
        # The markers of the execs running now: a timed-out command's kill spares only processes carrying one.
        self._live: Counter[str] = Counter()
        self.workspace = Workspace(self)
        self.credentials = Credentials()  # run-scoped secrets, in memory only; a reset drops them
        # Hooks for on-demand creation and hibernation (sandstack.runtime.metrics); the app sets its registry's.
        self.metrics: Metrics | NoMetrics = NoMetrics()
        self.claims = WarmClaims(self)
        self.ondemand = OnDemandPlaces(self, provisioner_for(backend))  # places above the warm sandboxes
        self.hibernation = Hibernation(self)
        self.ondemand.reconcile_quietly()
        self.processes = Processes(self)  # after the store: it ends what a previous run left running

    def _enter(self, name: str) -> None:
        with self._busy_lock:
            self._busy[name] += 1

    def _leave(self, name: str) -> None:
        with self._busy_lock:
            self._busy[name] -= 1
            if self._busy[name] <= 0:
                del self._busy[name]

    @contextmanager
    def transition(self, name: str) -> Iterator[None]:
        self._enter(name)
        try:
            yield
        finally:
            self._leave(name)

    @contextmanager
    def _marked(self, marker: str) -> Iterator[None]:
        self._mark(marker)
        try:
            yield
        finally:
            self._unmark(marker)

    def _mark(self, marker: str) -> None:
        with self._busy_lock:
            self._live[marker] += 1

    def _unmark(self, marker: str) -> None:
        with self._busy_lock:
            self._live[marker] -= 1
            if self._live[marker] <= 0:
                del self._live[marker]

    def live_markers(self) -> list[str]:
        with self._busy_lock:
            return sorted(self._live)

    def busy(self, name: str) -> bool:
        with self._busy_lock:
            return name in self._busy

    # Lookups: 404s that name what was not found

    def pool(self, name: str) -> PoolRuntime:
        if name not in self.config.pools:
            raise not_found("pool", name, self.host)
        return self.config.pools[name]

    def sandbox(self, name: str) -> SandboxRow:
        row = self.store.sandbox(name)
        if row is None:
            raise not_found("sandbox", name, self.host)
        return row

    def session(self, session: str) -> SandboxRow:
        row = self.store.by_session(session)
        if row is None:
            raise not_found("session", session, self.host)
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
                "session": row.session, "bound_at": row.bound_at, "from_snapshot": row.from_snapshot,
                "paused_by": row.paused_by, "idle_seconds": idle, "detail": row.detail, "container": container}

    # Sessions

    def claim(self, pool: str, session: str, from_snapshot: str | None = None) -> tuple[SandboxRow, bool]:
        """The session's sandbox, binding an idle one of the pool if the session has none; (row, created)."""
        spec = self.pool(pool)
        if not SESSION_ID.fullmatch(session):
            raise ApiError(422, f"session id {session!r} must be {SESSION_HINT}", session=session)
        snapshot = self.workspace.snapshot_row(from_snapshot, pool) if from_snapshot else None
        # An idle warm sandbox, checked with Docker outside the store's lock (sandstack.runtime.claims).
        taken = self.claims.take(pool, session, from_snapshot)
        if taken is not None and not taken.created:
            if taken.row.pool != pool:
                raise conflict(f"session {session!r} is bound to a sandbox of pool {taken.row.pool!r}, "
                               f"not {pool!r}", session=session, pool=taken.row.pool)
            return taken.row, False
        picked, needs_start = (taken.row, taken.needs_start) if taken else (None, False)
        if picked is None and spec.ondemand is not None:  # none warm and idle: a new one, within the ceiling
            claimed = self.ondemand.claim(pool, session, from_snapshot)
            if claimed is None:
                raise self.ondemand.at_ceiling(pool)
            picked = claimed[0]
            if not claimed[1] or not snapshot:
                return claimed
            self._enter(picked.name)
            needs_start = False
        if picked is None:
            raise self._no_capacity(pool, len(spec.sandboxes))
        try:
            if needs_start:
                self.backend.start(picked.name)
            if snapshot:
                self.workspace.restore(picked.name, snapshot.id, claiming=True)
        except (ApiError, BackendError):
            # Not half a session: the sandbox goes back (reset), the claim fails.
            self.store.update(picked.name, status="resetting", session=None)
            self._reset_quietly(picked.name)
            raise
        finally:
            self._leave(picked.name)
        return self.sandbox(picked.name), True

    def _no_capacity(self, pool: str, declared: int) -> ApiError:
        """503, naming why each sandbox that is neither bound nor idle is out of service."""
        out = [row for row in self.store.sandboxes(pool) if row.status in OUT_OF_SERVICE]
        if not out:
            return ApiError(503, f"no capacity: every sandbox of pool {pool!r} on host {self.host!r} is in use "
                                 f"({declared} declared)", pool=pool, host=self.host)
        why = "; ".join(f"{row.name} is {row.status}" + (f" ({row.detail})" if row.detail else "") for row in out)
        return ApiError(503, f"no capacity: no sandbox of pool {pool!r} on host {self.host!r} is idle ({declared} "
                             f"declared, {len(out)} out of service: {why})", pool=pool, host=self.host,
                        out_of_service={row.name: row.status for row in out})

    def _expired(self, state: ContainerState) -> str | None:
        """Why the host guard ended this stopped container for good (its exit status says), or None."""
        if state.status != "exited" or state.exit_code is None:
            return None
        limits = {code: limit for code, limit in ((self.config.exit_lifetime, "max lifetime"),
                                                  (self.config.exit_idle, "idle timeout")) if code is not None}
        limit = limits.get(state.exit_code)
        if limit is None:
            return None
        return (f"its {limit} was reached (exit {state.exit_code}) and on_expiry 'stop' keeps it stopped: it is "
                "not handed out again")

    def release(self, session: str) -> SandboxRow:
        row = self.session(session)
        self.hibernation.discard(row.name)
        if self.ondemand.is_place(row.name):  # above the warm sandboxes: retired, not kept idle
            return self.ondemand.retire(row.name)
        self.store.update(row.name, status="resetting", session=None, paused_by=None)
        try:
            self.reset(row.name)
        except DaemonUnavailable:
            # No partial state: the session keeps its sandbox and may release it again.
            self.store.update(row.name, status=row.status, session=row.session, paused_by=row.paused_by)
            raise
        except BackendError as error:
            self._quarantine(row.name, error)
        return self.sandbox(row.name)

    def reset(self, name: str, *, start: bool = True, detail: str | None = None) -> None:
        """Fresh processes and writable paths, then back to the pool as idle (left stopped unless `start`)."""
        with self.transition(name):
            self._reset(name, start=start, detail=detail)

    def _reset(self, name: str, *, start: bool = True, detail: str | None = None) -> None:
        spec = self.pool(self.sandbox(name).pool)
        self.end_session(name)
        state = self.backend.state(name)
        if state.status == "missing":
            raise SandboxGone(f"container {name!r} does not exist on this host")
        expired = self._expired(state)
        self.stop_and_empty(name, state)
        if spec.writable_root:  # what the session changed outside its writable paths (sandstack.runtime.rootfs)
            self.backend.reset_root(name)
        self._cpu.pop(name, None)
        if expired:
            self.store.update(name, status="expired", session=None, bound_at=None, from_snapshot=None,
                              paused_by=None, last_activity=None, detail=expired)
            return
        if start:
            self.backend.start(name)
        self.store.update(name, status="idle", session=None, bound_at=None, from_snapshot=None, paused_by=None,
                          last_activity=None, detail=detail)

    def end_session(self, name: str) -> None:
        """What the runtime holds for the session besides the container: its processes and run-scoped secrets."""
        self.processes.end_session(name, "its session ended: the sandbox was reset, which stopped it")
        self.credentials.drop(name)  # the session's secrets end with it, whatever the reset's outcome

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
        disk = [WorkspaceReset(w.path, w.keep, w.seed)
                for w in self.pool(self.sandbox(name).pool).writable if w.kind == "disk"]
        if disk:
            self.backend.clean_workspaces(name, disk)

    def _reset_quietly(self, name: str, *, start: bool = True, detail: str | None = None) -> None:
        try:
            self.reset(name, start=start, detail=detail)
        except BackendError as error:
            self._quarantine(name, error)

    def _quarantine(self, name: str, error: BackendError) -> None:
        """Out of the pool until a reset succeeds (the monitor tries again at every pass)."""
        log.warning("sandbox %s quarantined: reset failed: %s", name, error)
        self.store.update(name, status="quarantined", session=None,
                          detail=f"reset failed, retried by the monitor: {error}")

    # Using a bound sandbox

    def usable(self, name: str) -> SandboxRow:
        """The sandbox, bound and running, for exec and files; resumes one the idle policy paused."""
        row = self.sandbox(name)
        if row.status == "hibernated":  # the session's next use brings it back
            row = self.hibernation.resume(name)
        if row.status == "paused" and row.paused_by == "idle":
            with self.transition(name):
                self.backend.unpause(name)
                self.store.update(name, status="bound", paused_by=None)
            row = self.sandbox(name)
        if row.status == "paused":
            raise conflict(f"sandbox {name!r} is paused; resume it first (POST /v1/sandboxes/{name}/resume)",
                           sandbox=name, status="paused")
        if row.status != "bound":
            raise conflict(f"sandbox {name!r} is {row.status}, not bound to a session; claim one with "
                           "POST /v1/sessions", sandbox=name, status=row.status)
        self.store.touch(name)
        return row

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
                          detail=f"stopped running while bound to session {row.session!r}: {error}")
        return conflict(f"sandbox {row.name!r} stopped running; it is reported unhealthy and will be reset, "
                        f"and session {row.session!r} has ended", sandbox=row.name, status="unhealthy")

    @holding  # no pause while it runs
    def exec(self, name: str, *, command: list[str] | None, script: str | None, lang: str, cwd: str | None,
             env: dict[str, str], timeout: int | None) -> dict[str, object]:
        """A command run to its end in the request: a process (sandstack.runtime.processes) waited for."""
        cmd = self.processes.command(name, command=command, script=script, lang=lang, cwd=cwd, env=env)
        timeout = self.processes.timeout(name, timeout, self.config.exec_timeout_seconds)
        return self.processes.run(name, cmd, timeout)

    def _run_internal(self, name: str, argv: list[str], workdir: str, *, stdin=None, stdout=None,
                      timeout: float = 300, marker: str | None = None) -> tuple[int | None, str]:
        """One of the runtime's own scripts; (exit code, stderr). Marked as the runtime's own (a user's timed-out
        command's kill leaves it alone), on the system's PATH (not one the sandbox can write to)."""
        err = CappedBuffer(8192)
        marker = marker or f"internal-{uuid.uuid4().hex}"
        with self._marked(marker):
            status = self.backend.exec(name, argv, workdir=workdir, stdin=stdin,
                                       env={scripts.MARKER_ENV: marker, "PATH": scripts.SYSTEM_PATH},
                                       stdout=stdout if stdout is not None else CappedBuffer(8192), stderr=err,
                                       timeout=timeout)
        return status.exit_code, err.data.decode(errors="replace").strip()

    def pause(self, name: str, by: str = "api") -> SandboxRow:
        row = self.sandbox(name)
        if row.status == "paused":
            return row
        if row.status != "bound":
            raise conflict(f"sandbox {name!r} is {row.status}; only a bound sandbox can be paused",
                           sandbox=name, status=row.status)
        with self.leases.pause(name), self.transition(name):
            self.backend.pause(name)
            self.store.update(name, status="paused", paused_by=by)
        return self.sandbox(name)

    def resume(self, name: str) -> SandboxRow:
        row = self.sandbox(name)
        if row.status == "bound":
            return row
        if row.status != "paused":
            raise conflict(f"sandbox {name!r} is {row.status}; only a paused sandbox can be resumed",
                           sandbox=name, status=row.status)
        with self.transition(name):
            self.backend.unpause(name)
            self.store.update(name, status="bound", paused_by=None, last_activity=time.time())
        return self.sandbox(name)

