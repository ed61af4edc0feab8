"""Sessions: a claim binds a sandbox of a pool to a session id (an idle warm one, else a new one on demand within the
ceiling, restored from a snapshot for a branch), a release ends the session (the sandbox reset into the pool, or an
on-demand one retired), and what a session brings with it: its run-scoped secrets.

Every sandbox that ever runs is one the spec declared: the warm ones, and the on-demand places up to a pool's ceiling,
which sandstack.runtime.ondemand creates from the plan's recipe.
"""

from __future__ import annotations

import json
import re
import threading
from contextlib import contextmanager
from typing import Iterator

from sandstack.runtime import secret_files, sizes
from sandstack.runtime.backend import BackendError, DaemonUnavailable
from sandstack.runtime.config import Live
from sandstack.runtime.errors import ApiError, conflict, not_found
from sandstack.runtime.interfaces import (Credentials, Execs, Hibernation, Places, Sandboxes, SessionTokens,
                                          Snapshots, WarmClaims)
from sandstack.runtime.models import SESSION_HINT, SESSION_PATTERN
from sandstack.runtime.rootsnap import RootRestoreFailed
from sandstack.runtime.session_keys import key, owner, shown
from sandstack.runtime.store import SandboxRow, SnapshotRow
from sandstack.runtime.tokens import Scope

# A claim waiting for another of its session looks this often whether that one is creating its sandbox on demand.
CREATING_LOOK = 0.05
# fullmatch: a pattern's '$' lets Python's re take a trailing newline.
SESSION_ID = re.compile(SESSION_PATTERN.removeprefix("^").removesuffix("$"))


class Sessions:
    def __init__(self, live: Live, sandboxes: Sandboxes, claims: WarmClaims, places: Places,
                 snapshots: Snapshots, hibernation: Hibernation, credentials: Credentials, execs: Execs,
                 tokens: SessionTokens):
        self.live, self.sandboxes, self.claims, self.places = live, sandboxes, claims, places
        self.snapshots, self.hibernation, self.credentials, self.execs = snapshots, hibernation, credentials, execs
        self.tokens, self.store = tokens, sandboxes.store
        # Session keys a claim is binding now, and the end of that claim: a second claim of the same key (a retry
        # after a lost answer, a platform's double submit, another size) waits for it and then answers from what it
        # bound, so the two never both bind (one process serves claims: memory is enough).
        self._claiming: dict[str, threading.Event] = {}
        self._claiming_lock = threading.Lock()

    # A session by the id its scope names it by (sandstack.runtime.session_keys)

    def key_for(self, scope: Scope, session: str) -> str:
        """The session `scope` names `session`. A row written before sessions were kept per scope (no scope in its
        key) whose pool the scope acts on becomes this scope's, with its snapshots, the first time it names it."""
        mine = key(scope.name, session)
        if self.store.by_session(mine) is None:
            for row in self.store.with_session_id(session):
                if row.session is not None and owner(row.session) is None and scope.allows(row.pool):
                    self.store.rename_session(row.session, mine)
                    break
        return mine

    def lookup(self, scope: Scope, session: str) -> SandboxRow:
        """The sandbox of the session `scope` names `session`; 404 as for any name on no pool when it has none. A
        session's token names only its own; the host's token reaches any scope's session by its id when only one
        scope holds that id (409 when several do: name its sandbox instead)."""
        host = self.sandboxes.host
        if scope.session is not None:
            row = self.store.by_session(scope.session)
            if shown(scope.session) == session and row is not None and scope.holds(row):
                return row
            raise not_found("session", session, host)
        mine = self.key_for(scope, session)
        row = self.store.by_session(mine)
        if row is not None and scope.allows(row.pool):
            return row
        ended = self.store.ended(mine)
        if ended is not None:  # the runtime ended it (its container replaced, died, ...): say why, not just 404
            raise ApiError(404, f"session {session!r} has ended: {ended[2]}", session=session, sandbox=ended[0],
                           ended_at=ended[1])
        if scope.operator:
            held = self.store.with_session_id(session)
            if len(held) == 1:
                return held[0]
            if held:
                owners = sorted(str(owner(r.session or "")) for r in held)
                raise conflict(f"session id {session!r} is held by {len(held)} token scopes ({', '.join(owners)}) "
                               "on this host: name its sandbox instead (GET /v1/sandboxes)", session=session)
        raise not_found("session", session, host)

    def claim(self, pool: str, session: str, from_snapshot: str | None = None,
              size: str | None = None) -> tuple[SandboxRow, bool]:
        """The sandbox of `session` (a key: sandstack.runtime.session_keys), binding an idle one of the pool if the
        session has none; (row, created). `size`: a size class of the pool (sandstack.runtime.sizes)."""
        spec = self.live.declared(pool)
        if spec is None:  # a retired pool (sandstack.runtime.config) takes no new session
            raise not_found("pool", pool, self.sandboxes.host)
        if not SESSION_ID.fullmatch(shown(session) or ""):
            raise ApiError(422, f"session id {shown(session)!r} must be {SESSION_HINT}", session=shown(session))
        sizes.wanted(spec, pool, size)  # an unknown class: 422 before anything is taken (or waited for)
        with self._first_claim(session):
            return self._claim(pool, session, from_snapshot, size)

    @contextmanager
    def _first_claim(self, session: str) -> Iterator[None]:
        """Inside: no other claim of `session` runs. One that does is waited for, except while the sandbox it binds
        is being created on demand: that claim answers the row ('creating'), which the client waits out."""
        while True:
            with self._claiming_lock:
                running = self._claiming.get(session)
                if running is None:
                    done = self._claiming[session] = threading.Event()
                    break
            row = self.store.by_session(session)
            if row is not None and row.status == "creating":
                yield  # the checks below answer it (same pool and size: 200 'creating'; else 409), binding nothing
                return
            running.wait(CREATING_LOOK)
        try:
            yield
        finally:
            with self._claiming_lock:
                del self._claiming[session]
            done.set()

    def _claim(self, pool: str, session: str, from_snapshot: str | None,
               size: str | None) -> tuple[SandboxRow, bool]:
        spec = self.live.declared(pool)
        if spec is None:  # retired while this claim waited for another of its session
            raise not_found("pool", pool, self.sandboxes.host)
        limits = sizes.wanted(spec, pool, size)
        snapshot = self.snapshots.row(from_snapshot, pool) if from_snapshot else None
        existing = self.store.by_session(session)
        if existing is not None and existing.pool != pool:
            raise conflict(f"session {shown(session)!r} is bound to a sandbox of pool {existing.pool!r}, "
                           f"not {pool!r}", session=shown(session), pool=existing.pool)
        if existing is not None and existing.size != size:
            raise conflict(f"session {shown(session)!r} holds a sandbox of {_size_words(existing.size)}, not "
                           f"{_size_words(size)}: release it to claim another size", session=shown(session),
                           size=existing.size)
        # An idle warm sandbox, checked with Docker outside the store's lock (sandstack.runtime.claims); none for a
        # class whose disk a running sandbox cannot be given.
        fresh = sizes.needs_new_sandbox(spec, limits)
        taken = self.claims.take(pool, session, from_snapshot) if not fresh else None
        if taken is not None and not taken.created:
            if taken.row.pool != pool:
                raise conflict(f"session {shown(session)!r} is bound to a sandbox of pool {taken.row.pool!r}, "
                               f"not {pool!r}", session=shown(session), pool=taken.row.pool)
            return taken.row, False
        if fresh and existing is not None:
            return existing, False
        picked, needs_start = (taken.row, taken.needs_start) if taken else (None, False)
        if picked is None and fresh and spec.ondemand is None:
            raise ApiError(503, f"no capacity: size class {size!r} of pool {pool!r} has another disk than the "
                                "pool's, which only a sandbox created on demand can have, and the pool has no "
                                "on-demand places on this host", pool=pool, size=size)
        if picked is None and spec.ondemand is not None:  # none warm and idle: a new one, within the ceiling
            claimed = self.places.claim(pool, session, from_snapshot, size)
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
            if limits is not None:  # before its session's first call: the class's limits, or the pool's own
                own = json.dumps(sizes.update_body(spec.sizes.default)) if spec.sizes and size else None
                self.store.update(picked.name, size=size, restore=own)
                body, container = sizes.update_body(limits), taken.container if taken else None
                # Unless the runtime set exactly these on this very container before (its last reset restored them).
                if picked.applied is None or picked.applied != sizes.applied(container, body):
                    self.sandboxes.backend.resize(picked.name, body)
                    self.store.update(picked.name, applied=sizes.applied(container, body))
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
        """Ends the session (a key): its tokens first, then its sandbox reset into the pool (or retired)."""
        row = self.sandboxes.of_session(session)
        self.tokens.end(session)
        self.store.forget_ended(session)  # an earlier binding's end, answered no more once the id is released
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
                                f"{shown(failed.session)!r} has ended", sandbox=name,
                           snapshot=snapshot_id) from failed.error


def _size_words(size: str | None) -> str:
    return f"size class {size!r}" if size is not None else "the pool's own limits"
