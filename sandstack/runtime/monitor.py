"""The runtime's monitor pass: each sandbox's health against Docker's state, the idle policies, expired sandboxes
coming back, snapshot retention, the store's checkpoint. It owns what it samples between passes: each bound
sandbox's CPU (the idle clock) and the runs of expired sandboxes seen running."""

from __future__ import annotations

import logging
import time
from typing import Callable

from sandstack.runtime.backend import BackendError, ContainerState, DaemonUnavailable
from sandstack.runtime.config import Live
from sandstack.runtime.errors import ApiError
from sandstack.runtime.interfaces import Hibernation, Places, Sandboxes, SessionTokens, Snapshots
from sandstack.runtime.session_keys import shown
from sandstack.runtime.store import Binding, SandboxRow, TokenRow

MISSING = "container is missing"  # what a pass notes of a sandbox with no container (row.detail)
log = logging.getLogger("sandstack.runtime")
ENDED_KEPT = 7 * 24 * 3600  # seconds a session the runtime ended is answered with its cause


class Monitor:
    def __init__(self, live: Live, sandboxes: Sandboxes, places: Places, hibernation: Hibernation,
                 snapshots: Snapshots, tokens: SessionTokens):
        self.live, self.sandboxes, self.places, self.hibernation, self.snapshots = (live, sandboxes, places,
                                                                                    hibernation, snapshots)
        self.tokens = tokens
        # Told of each session the runtime ends on its own (session key, sandbox, cause): the app audits it.
        self.on_ended: Callable[[str, str, str], None] = lambda session, sandbox, cause: None
        self.store, self.backend, self.leases = sandboxes.store, sandboxes.backend, sandboxes.leases
        # sandbox → (the run sampled, when, CPU ns) for the idle check: a new run (a reset's start, a resume) has
        # no rate yet.
        self._cpu: dict[str, tuple[str | None, float, int]] = {}
        # expired sandbox → the StartedAt of the run seen at the last pass: one running at two passes is new.
        self._expired_runs: dict[str, str | None] = {}

    def once(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        try:
            self.backend.reconcile_states()  # a container event Docker failed to deliver is caught here
        except DaemonUnavailable as error:
            log.warning("monitor: %s", error)
            return
        except BackendError as error:  # the list refused: the pass goes on (reads still ask Docker when unsure)
            log.warning("monitor: reconcile of container states: %s", error)
        for row in self.store.sandboxes():
            if self.sandboxes.busy(row.name):
                continue
            try:
                if row.status == "hibernated":
                    self.hibernation.tend(row)  # no container runs under it (a failed resume's, stopped again)
                if self.places.tend(row):  # absent, creating, hibernated; on-demand ones retired
                    continue
                self._check(row, now)
            except DaemonUnavailable as error:
                log.warning("monitor: %s", error)
                return
            except BackendError as error:
                log.warning("monitor: sandbox %s: %s", row.name, error)
            except Exception as error:  # one sandbox's surprise must not stop the pass for the others
                log.exception("monitor: sandbox %s", row.name)  # the text stays in the log: it may hold anything
                self.store.update(row.name, status="unhealthy", session=None,
                                  detail=f"the monitor failed on it ({type(error).__name__}; see the runtime's "
                                         "log); it is reset again at the next pass")
        try:
            self.tokens.prune(self._binding_stands)  # expired, or their session ended without a release
        except Exception:
            log.exception("monitor: session tokens")
        try:
            self.snapshots.apply_retention(now)
        except Exception:
            log.exception("monitor: snapshot retention")
        try:
            self.store.checkpoint()  # here, not in a request's commit (sandstack.runtime.store)
        except Exception:
            log.exception("monitor: the store's checkpoint")

    def _check(self, listed: SandboxRow, now: float) -> None:
        row = self.store.sandbox(listed.name)  # as it is now, not as it was when the pass began
        if row is None:
            return
        if row.status in ("unhealthy", "resetting", "quarantined"):
            # Reported at least one pass (or left by a runtime that stopped mid-reset): reset it now.
            state = self.backend.state(row.name)
            if state.status == "missing":
                return
            if row.status == "unhealthy" and row.session is None and row.detail == MISSING and state.running:
                # Made since it was found missing (an apply creates a new warm sandbox after the runtime took the
                # configuration naming it): a fresh container holds nothing of any session. A reset would restart
                # it under the apply that just made it (seen in the change drill as a sandbox the diff did not
                # say restarts).
                self.store.update(row.name, status="idle", detail=None)
                return
            self.sandboxes.reset_quietly(row.name)
            return
        state = self.backend.state(row.name)
        if row.status == "expired":
            # A new container in its place (the stack replaced it) is fresh: into the pool. Docker's crash retries
            # of the expired one run for a moment each (its supervisor ends them at once), so the same run must
            # be seen at two passes.
            if not state.running:
                self._expired_runs.pop(row.name, None)
            elif self._expired_runs.get(row.name) == state.started_at:
                del self._expired_runs[row.name]
                self.sandboxes.reset_quietly(row.name)
            else:
                self._expired_runs[row.name] = state.started_at
            return
        if row.status == "idle" and (why := self.sandboxes.expired(state)):
            self._judge(row, status="expired", detail=why)
            return
        ended = self._ended_by_guard(state, row.session)
        if row.status in ("bound", "paused") and self._replaced(row, state):
            return
        if row.status in ("bound", "paused") and state.started_at:
            if (first := self.sandboxes.first_run(row.name, state.started_at)) != state.started_at:
                self.sandboxes.forget_run(row.name)
                # Running again: the exit status is Docker's past `die` event's (its state reads 0 now).
                ended = ended or self._ended_by_guard(state, row.session, self._last_exit(row.name, first))
                self._judge(row, status="unhealthy", session=None,
                            detail=ended or f"container restarted while bound to session {shown(row.session)!r}: its "
                                            "processes and writable paths are gone")
                return
        expected = {"bound": ("running",), "paused": ("paused",), "idle": ("running", "exited", "created")}
        if state.status not in expected[row.status]:
            detail = f"container is {state.status}" + (f" (exit {state.exit_code})" if state.exit_code else "")
            if row.session:
                detail += f" while bound to session {shown(row.session)!r}"
            self._judge(row, status="unhealthy", session=None, detail=ended or detail)
            return
        policy = self.sandboxes.pool(row.pool).idle
        if row.status != "bound" or policy is None or self.leases.in_use(row.name):
            return  # a running exec or file operation is activity
        if self._cpu_active(row.name, state, now):
            self.store.update(row.name, last_activity=now)
            return
        if row.last_activity is not None and now - row.last_activity >= policy.after_seconds:
            log.info("sandbox %s idle for %ss: %s", row.name, policy.after_seconds, policy.action)
            if policy.action == "pause":
                try:
                    self.sandboxes.pause(row.name, by="idle")
                except ApiError as busy:  # an exec began since the check above: activity, not an idle sandbox
                    log.info("sandbox %s not paused: %s", row.name, busy.message)
            elif policy.action == "hibernate":
                try:
                    self.hibernation.hibernate(row.name, by="idle")
                except ApiError as busy:
                    log.info("sandbox %s not hibernated: %s", row.name, busy.message)
            elif self.places.is_place(row.name):  # 'reset' or 'stop' of one above the warm sandboxes: retired
                self.places.retire(row.name, detail=f"retired after being idle ({policy.action})")
            elif policy.action == "reset":
                if self._judge(row, status="resetting", session=None):
                    self.sandboxes.reset_quietly(row.name)
            elif self._judge(row, status="resetting", session=None):
                # Stopped and cleaned now, not at the next claim: nothing of the session waits on the host.
                self.sandboxes.reset_quietly(row.name, start=False, detail="stopped after being idle")

    def _replaced(self, row: SandboxRow, state: ContainerState) -> bool:
        """Whether the session's container was replaced by another of the same name (an apply recreated it, while
        the runtime ran or was down): Docker's Id differs from the one the binding was first seen on. Such a session
        has lost its processes and files: it is ended with the cause, never left bound to the new, empty container
        (issue 36 item 4). The first look at a binding records its container."""
        if state.container_id is None or row.session is None:
            return False
        seen = self.store.binding(row.name)
        if seen is None or (seen.session, seen.bound_at) != (row.session, row.bound_at):
            self.store.bind_container(Binding(row.name, row.session, row.bound_at, state.container_id,
                                              state.created))
            return False
        if seen.container == state.container_id:
            return False
        self._judge(row, status="unhealthy", session=None,
                    detail=f"its container was replaced while bound to session {shown(row.session)!r} (a new "
                           f"container of the same name, created {state.created}; the stack's apply recreated "
                           "it): its processes and writable paths are gone, and the session has ended")
        return True

    def _binding_stands(self, token: TokenRow) -> bool:
        row = self.store.sandbox(token.sandbox)
        return row is not None and (row.session, row.bound_at) == (token.session, token.bound_at)

    def _last_exit(self, name: str, since: str) -> int | None:
        try:
            return self.backend.last_exit(name, since)
        except BackendError as error:  # the restart is reported all the same, as a restart
            log.warning("monitor: sandbox %s: its last exit status is not known: %s", name, error)
            return None

    def _ended_by_guard(self, state: ContainerState, session: str | None, code: int | None = None) -> str | None:
        """Why a bound sandbox's run ended, when the host guard ended it at a limit: its exit status says so while
        Docker restarts it (`restarting`, or `exited` after its retries), or `code` (a run started again reads 0).
        Its restart was reported as a crash's ("container restarted while bound"), an on-demand place's included."""
        if code is None and state.status in ("restarting", "exited"):
            code = state.exit_code
        config = self.live.config
        limits = {config.exit_lifetime: "max lifetime", config.exit_idle: "idle timeout"}
        limit = limits.get(code) if code else None
        if limit is None or session is None:
            return None
        return (f"its {limit} was reached (exit {code}) while bound to session {shown(session)!r}: the host guard ended it, "
                "and the session with it")

    def _judge(self, row: SandboxRow, **fields: object) -> bool:
        """The pass's verdict on a row, written only if the row is still as read before Docker was asked: a claim
        may have bound it meanwhile, or a release and a claim given it to another session (Docker's answer takes
        long on a busy host). Whether it was written."""
        written = self.store.update_if(row.name, {"status": row.status, "session": row.session}, **fields)
        if written and fields.get("detail"):  # the row's detail is gone after the reset: the log keeps why
            log.warning("monitor: sandbox %s is %s: %s", row.name, fields["status"], fields["detail"])
        if written and row.session is not None and "session" in fields and fields["session"] is None:
            self.ended(row.session, row.name, str(fields.get("detail") or f"its sandbox is {fields['status']}"))
        return written

    def ended(self, session: str, sandbox: str, cause: str) -> None:
        """A session the runtime ended on its own: kept with its cause (a lookup of it answers why: sandstack.runtime.
        sessions) and told to `on_ended` (the app writes it to the audit log)."""
        self.store.end_session(session, sandbox, time.time(), cause, ENDED_KEPT)
        self.on_ended(session, sandbox, cause)

    def _cpu_active(self, name: str, state: ContainerState, now: float) -> bool:
        """Whether the sandbox used more CPU than an idle one since the last sample of this run (measured from
        outside)."""
        used = self.backend.cpu_usage_ns(name)
        previous = self._cpu.get(name)
        if used is None:
            return False
        self._cpu[name] = (state.started_at, now, used)
        if previous is None or previous[0] != state.started_at or now <= previous[1]:
            return True  # no rate yet (a new claim's run, a restarted runtime): not known to be idle
        per_second_ns = (used - previous[2]) / (now - previous[1])
        return per_second_ns > self.live.config.idle_cpu_ms_per_s * 1_000_000

