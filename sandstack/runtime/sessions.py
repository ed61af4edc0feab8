"""Sessions: a claim binds a sandbox of a pool to a session id (an idle warm one, else a new one on demand within the
ceiling, restored from a snapshot for a branch), a release ends the session (the sandbox reset into the pool, or an
on-demand one retired), and what a session brings with it: its run-scoped secrets.

Every sandbox that ever runs is one the spec declared: the warm ones, and the on-demand places up to a pool's ceiling,
which sandstack.runtime.ondemand creates from the plan's recipe.
"""

from __future__ import annotations

import re

from sandstack.runtime import secret_files
from sandstack.runtime.backend import BackendError, DaemonUnavailable
from sandstack.runtime.config import Live
from sandstack.runtime.errors import ApiError, conflict, not_found
from sandstack.runtime.interfaces import (Credentials, Execs, Hibernation, Places, Sandboxes, Snapshots,
                                          WarmClaims)
from sandstack.runtime.models import SESSION_HINT, SESSION_PATTERN
from sandstack.runtime.rootsnap import RootRestoreFailed
from sandstack.runtime.store import SandboxRow, SnapshotRow

# fullmatch: a pattern's '$' lets Python's re take a trailing newline.
SESSION_ID = re.compile(SESSION_PATTERN.removeprefix("^").removesuffix("$"))


class Sessions:
    def __init__(self, live: Live, sandboxes: Sandboxes, claims: WarmClaims, places: Places,
                 snapshots: Snapshots, hibernation: Hibernation, credentials: Credentials, execs: Execs):
        self.live, self.sandboxes, self.claims, self.places = live, sandboxes, claims, places
        self.snapshots, self.hibernation, self.credentials, self.execs = snapshots, hibernation, credentials, execs

    def claim(self, pool: str, session: str, from_snapshot: str | None = None) -> tuple[SandboxRow, bool]:
        """The session's sandbox, binding an idle one of the pool if the session has none; (row, created)."""
        spec = self.live.declared(pool)
        if spec is None:  # a retired pool (sandstack.runtime.config) takes no new session
            raise not_found("pool", pool, self.sandboxes.host)
        if not SESSION_ID.fullmatch(session):
            raise ApiError(422, f"session id {session!r} must be {SESSION_HINT}", session=session)
        snapshot = self.snapshots.row(from_snapshot, pool) if from_snapshot else None
        # An idle warm sandbox, checked with Docker outside the store's lock (sandstack.runtime.claims).
        taken = self.claims.take(pool, session, from_snapshot)
        if taken is not None and not taken.created:
            if taken.row.pool != pool:
                raise conflict(f"session {session!r} is bound to a sandbox of pool {taken.row.pool!r}, "
                               f"not {pool!r}", session=session, pool=taken.row.pool)
            return taken.row, False
        picked, needs_start = (taken.row, taken.needs_start) if taken else (None, False)
        if picked is None and spec.ondemand is not None:  # none warm and idle: a new one, within the ceiling
            claimed = self.places.claim(pool, session, from_snapshot)
            if claimed is None:
                raise self.places.at_ceiling(pool)
            picked = claimed[0]
            if not claimed[1] or not snapshot:
                return claimed
            self.sandboxes.begin(picked.name)
            needs_start = False
        if picked is None:
            raise self.sandboxes.no_capacity(pool, len(spec.sandboxes))
        try:
            if needs_start:
                self.sandboxes.backend.start(picked.name)
            if snapshot:
                self.snapshots.restore(picked.name, snapshot.id, claiming=True)
        except (ApiError, BackendError):
            # Not half a session: the sandbox goes back (reset), the claim fails.
            self.sandboxes.store.update(picked.name, status="resetting", session=None)
            self.sandboxes.reset_quietly(picked.name)
            raise
        finally:
            self.sandboxes.finish(picked.name)
        return self.sandboxes.get(picked.name), True

    def give_secrets(self, row: SandboxRow, session: str, env: dict[str, str], files: dict[str, str]) -> list[str]:
        """The claim's run-scoped secrets for the session (replacing any it was given); their names, for the audit
        line (never a value)."""
        had_files = bool(self.credentials.files(row.name))
        self.credentials.give(row.name, session, env, files)
        # Files given before and none now: removed. A sandbox another claim of the session is still creating gets
        # them from that claim (its own secrets), not from this one, which cannot write into it yet.
        if (files or had_files) and row.status != "creating":
            secret_files.write(self.execs, row.name, files)
        return sorted(env) + [f"{secret_files.SESSION_SECRETS_DIR}/{name}" for name in sorted(files)]

    def release(self, session: str) -> SandboxRow:
        row = self.sandboxes.of_session(session)
        self.hibernation.discard(row.name)
        if self.places.is_place(row.name):  # above the warm sandboxes: retired, not kept idle
            return self.places.retire(row.name)
        store = self.sandboxes.store
        store.update(row.name, status="resetting", session=None, paused_by=None)
        try:
            self.sandboxes.reset(row.name)
        except DaemonUnavailable:
            # No partial state: the session keeps its sandbox and may release it again.
            store.update(row.name, status=row.status, session=row.session, paused_by=row.paused_by)
            raise
        except BackendError as error:
            self.sandboxes.quarantine(row.name, error)
        return self.sandboxes.get(row.name)

    def restore(self, name: str, snapshot_id: str) -> SnapshotRow:
        """An API restore into bound sandbox `name`: one that fails while a writable root is written back ends the
        session (sandstack.runtime.rootsnap), and the answer (502) says so."""
        try:
            return self.snapshots.restore(name, snapshot_id)
        except RootRestoreFailed as failed:
            try:
                if failed.session is not None:
                    self.release(failed.session)
            except BackendError:
                pass  # the daemon is gone: the session keeps its stopped sandbox, which the monitor judges
            raise ApiError(502, f"restoring snapshot {snapshot_id!r} into sandbox {name!r} failed while its root "
                                f"was written back ({failed.error}); the sandbox was reset and session "
                                f"{failed.session!r} has ended", sandbox=name, snapshot=snapshot_id) from failed.error
