"""Sandboxes created on demand, up to a pool's declared ceiling (docs/design/ondemand.md).

A pool with `max` above `replicas` has a place per replica above its warm ones; the plan gives the runtime each
place's container recipe (sandstack.plan.recipe), the Engine API body of exactly the container its component would
make for that replica. Every place is a row of the store from the start: 'absent' while no container exists,
'creating' while a claim makes it, then the statuses of any sandbox. When a claim finds no idle warm sandbox it
takes an absent place and creates it; a release, an idle 'reset' or 'stop', or a repaired place left idle retires it
(its disk workspaces emptied by the same reset as a warm sandbox's, then the container removed: its place is absent
again). At start and at each monitor pass until it succeeds, the reconcile matches the store to Docker: places whose
container is gone are absent, containers of this stack and host labelled on demand that no place's current recipe
made (a changed or removed pool, a lowered ceiling) are removed unless bound to a session, which keeps them until
its release.
"""

from __future__ import annotations

import logging
import time
from contextlib import AbstractContextManager
from typing import Any, Protocol

import requests

from sandstack.plan.recipe import LABEL_ONDEMAND, LABEL_RECIPE
from sandstack.plan.runtime import PoolRuntime
from sandstack.runtime import sizes
from sandstack.runtime.backend import BackendError, DaemonUnavailable, SandboxNotRunning
from sandstack.runtime.ceilings import Ceilings
from sandstack.runtime.config import Live
from sandstack.runtime.errors import ApiError
from sandstack.runtime.interfaces import Readiness, Sandboxes
from sandstack.runtime.readiness import Health, probe_of
from sandstack.runtime.sandboxes import OUT_OF_SERVICE
from sandstack.runtime.session_keys import shown
from sandstack.runtime.store import SandboxRow, Store

log = logging.getLogger("sandstack.runtime")
QUIET = ("absent", "creating", "hibernated")  # rows the monitor's health check leaves alone


class Provisioner(Health, Protocol):
    """What creating sandboxes needs from Docker, beside the runtime's backend (docker_backend.DockerProvisioner; a
    test's stand-in)."""

    def create(self, name: str, body: dict[str, Any]) -> None:
        """Create the container from the Engine API body and start it."""

    def remove(self, name: str) -> None:
        """Remove the container, running or not (its volumes stay: they are the stack's)."""

    def listed(self, labels: dict[str, str]) -> dict[str, str]:
        """Containers carrying every label: name → their recipe digest label."""



class OnDemandPlaces:
    def __init__(self, live: Live, sandboxes: Sandboxes, store: Store, provisioner: Provisioner | None,
                 readiness: Readiness):
        self.live, self.sandboxes, self.store = live, sandboxes, store
        self.provisioner, self.readiness = provisioner, readiness
        self.reconciled = False
        self.ceilings = Ceilings(store)  # a pool's running and hibernated ceilings, when it counts them apart

    def is_place(self, name: str) -> bool:
        """Whether `name` is an on-demand place (above its pool's warm sandboxes)."""
        row = self.store.sandbox(name)
        spec = self.live.settings(row.pool) if row else None
        return bool(spec and spec.ondemand and name in spec.ondemand.places) or self.live.retired_place(name)

    def _recipes(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """place → (pool, body) of every on-demand place of this host."""
        return {name: (pool, spec.ondemand.body(name)) for pool, spec in self.live.config.pools.items()
                if spec.ondemand for name in spec.ondemand.places}

    def _need(self) -> Provisioner:
        if self.provisioner is None:
            raise BackendError("this runtime has no Docker to create or remove on-demand sandboxes with")
        return self.provisioner

    # Claims

    def claim(self, pool: str, session: str, from_snapshot: str | None = None,
              size: str | None = None) -> tuple[SandboxRow, bool] | None:
        """Bind a new sandbox of the pool to the session, made with the limits of size class `size` (the pool's own
        when None: sandstack.runtime.sizes); None when the pool has no free place."""
        spec, host = self.sandboxes.pool(pool), self.sandboxes.host
        if self.provisioner is None:
            raise ApiError(503, f"no capacity: pool {pool!r} on host {host!r} may create sandboxes on "
                                "demand, but this runtime has no Docker to create them with", pool=pool, host=host)
        assert spec.ondemand is not None
        # The ceilings' lock first, then the store's: 'creating' counts as running once written.
        with self.ceilings.lock, self.store.transaction() as db:
            existing = self.store.by_session(session)
            if existing:  # a concurrent claim of the same session bound one meanwhile
                return existing, False
            free = [row for row in self.store.sandboxes(pool) if row.status == "absent"
                    and row.name in spec.ondemand.places]
            if not free or not self.ceilings.room_to_run(pool, spec):
                return None
            name = free[0].name
            self.sandboxes.begin(name)
            self.store.update(name, db, status="creating", session=session, bound_at=time.time(),
                              from_snapshot=from_snapshot, paused_by=None, last_activity=time.time(), detail=None,
                              size=size)
        try:
            self._create(name, self._body(spec, pool, name, size), spec.ondemand.wait_seconds)
            self.store.update(name, status="bound")
        except (BackendError, ApiError) as error:
            self.discard(name, f"its creation failed: {getattr(error, 'message', error)}")
            if isinstance(error, DaemonUnavailable):
                raise
            raise ApiError(503, f"no capacity: a sandbox of pool {pool!r} on host {host!r} could not be "
                                f"created on demand: {getattr(error, 'message', error)}", pool=pool,
                           host=host) from error
        finally:
            self.sandboxes.finish(name)
        return self.sandboxes.get(name), True

    def recreate(self, name: str) -> None:
        """A hibernated place's container, made again from its recipe (its disk workspaces kept their files)."""
        row = self.sandboxes.get(name)
        spec = self.sandboxes.pool(row.pool)
        assert spec.ondemand is not None
        self._create(name, self._body(spec, row.pool, name, row.size), spec.ondemand.wait_seconds)

    @staticmethod
    def _body(spec: PoolRuntime, pool: str, name: str, size: str | None) -> dict[str, Any]:
        """The place's recipe with the limits of its session's size class (or the pool's own, for a pool with
        classes: a pids limit of the sandbox's own under the guard's largest)."""
        assert spec.ondemand is not None
        limits = sizes.wanted(spec, pool, size) if spec.sizes is not None else None
        return sizes.create_body(spec.ondemand.body(name), limits)

    def resuming(self, name: str) -> AbstractContextManager[None]:
        """Room under the running ceiling while a hibernated place is brought back (sandstack.runtime.ceilings)."""
        row = self.sandboxes.get(name)
        return self.ceilings.resuming(name, row.pool, self.sandboxes.pool(row.pool), self.sandboxes.host)

    def hibernating(self, name: str, by: str) -> AbstractContextManager[None]:
        """A place among the hibernated sessions while a bound sandbox is hibernated (sandstack.runtime.ceilings)."""
        row = self.sandboxes.get(name)
        return self.ceilings.hibernating(name, row.pool, self.sandboxes.pool(row.pool), self.sandboxes.host, by)

    def remove(self, name: str) -> None:
        """The place's container removed (its disk workspaces stay on their volumes, which are the stack's)."""
        self._need().remove(name)

    def at_ceiling(self, pool: str) -> ApiError:
        """503, naming the sandboxes out of service: a warm one being reset or repaired counts toward the ceiling
        though no session has it (a claim then finds the pool full before its ceiling's worth of sessions)."""
        spec, host = self.sandboxes.pool(pool), self.sandboxes.host
        assert spec.ondemand is not None
        ceiling = spec.ondemand.ceiling
        out = [row for row in self.store.sandboxes(pool) if row.status in OUT_OF_SERVICE]
        why = "; ".join(f"{row.name} is {row.status}" + (f" ({row.detail})" if row.detail else "") for row in out)
        extra = {"out_of_service": {row.name: row.status for row in out}} if out else {}
        if self.ceilings.apart(spec):
            return self.ceilings.at_ceiling(pool, spec, host, f" ({len(out)} out of service: {why})" if out else "",
                                            extra)
        return ApiError(503, f"no capacity: pool {pool!r} on host {host!r} is at its ceiling of "
                             f"{ceiling} sandboxes ({len(spec.sandboxes)} warm, {len(spec.ondemand.places)} on "
                             "demand), none idle" + (f" ({len(out)} out of service: {why})" if out else ""),
                        pool=pool, host=host, ceiling=ceiling, **extra)

    def _create(self, name: str, body: dict[str, Any], wait_seconds: int) -> None:
        provisioner = self._need()
        # A new container: its start is not a restart of the session's (the monitor compares StartedAt).
        self.sandboxes.forget_run(name)
        self.store.forget_binding(name)  # nor is its new Docker Id a replacement of the session's container
        try:
            provisioner.create(name, body)
        except SandboxNotRunning:  # Docker's 409: the name is taken, by one a runtime stopped mid-creation left
            # Removed only then: a remove before every create cost each claim a Docker call (issue 22's ratio).
            provisioner.remove(name)
            provisioner.create(name, body)
        # The probe is the body's own health check: run at once, with no inspect before it.
        self.readiness.ready(name, wait_seconds, probe_of(body.get("Healthcheck"), body.get("WorkingDir")))

    def discard(self, name: str, detail: str) -> None:
        """The place's container removed whatever it held, the place absent again with `detail` (a failed creation,
        a container the runtime's stop could not hibernate)."""
        try:
            self._need().remove(name)
        except BackendError as error:
            log.warning("on-demand sandbox %s not removed: %s", name, error)
        self.store.update(name, status="absent", session=None, bound_at=None, from_snapshot=None,
                          paused_by=None, last_activity=None, detail=detail, size=None)

    # Retiring

    def retire(self, name: str, detail: str | None = None) -> SandboxRow:
        """Empty its disk workspaces (as a reset does), then remove the container: the place is absent again. A
        failure quarantines it, as a reset's does; the monitor retires it later."""
        sandboxes = self.sandboxes
        with sandboxes.transition(name):
            self.store.update(name, status="resetting", session=None, paused_by=None)
            try:
                sandboxes.end_session(name)
                state = sandboxes.backend.state(name)
                if state.status != "missing":
                    sandboxes.stop_and_empty(name, state)
                self._need().remove(name)
            except DaemonUnavailable:
                raise
            except BackendError as error:
                sandboxes.quarantine(name, error)
                return sandboxes.get(name)
            self.store.update(name, status="absent", session=None, bound_at=None, from_snapshot=None,
                              paused_by=None, last_activity=None, detail=detail, size=None)
        return sandboxes.get(name)

    # The monitor's part

    def tend(self, row: SandboxRow) -> bool:
        """The monitor's pass over one row: True when this module dealt with it (the health check skips it)."""
        if not self.reconciled:
            self.reconcile()
        if not self.is_place(row.name):
            return row.status in QUIET
        row = self.store.sandbox(row.name) or row  # as it is now: a claim may have bound it since the list
        if row.status in QUIET:
            return True
        if row.status in ("unhealthy", "quarantined", "resetting", "idle", "expired"):
            # Nothing of a session is in it (or it is lost): retired, as a release would.
            self.retire(row.name, detail=row.detail)
            return True
        return False

    def reconcile(self) -> None:
        """The store against Docker, after a start (or a failed one): see the module's docstring."""
        if self.provisioner is None:
            self.reconciled = True
            return
        recipes = self._recipes()
        # This stack's and host's on-demand containers (the labels the plan gives the runtime: its stack and host).
        labels = self.live.config.ondemand_labels
        present = self.provisioner.listed({**labels, LABEL_ONDEMAND: "true"})
        if not labels:
            # A configuration without them (made by hand, not by the plan) cannot tell its containers from another
            # stack's on the same daemon: only its own places' names (they name the stack) are its own.
            present = {name: digest for name, digest in present.items() if name in recipes}
        for name, digest in present.items():
            row = self.store.sandbox(name)
            wanted = recipes.get(name)
            current = wanted is not None and wanted[1]["Labels"].get(LABEL_RECIPE) == digest
            if current and row is not None and row.status not in ("absent", "creating"):
                continue
            if row is not None and row.session is not None and row.status != "creating":
                continue  # a changed pool's sandbox still bound: retired at its release, not under the session
            log.info("reconcile: removing on-demand sandbox %s (%s)", name,
                     "its pool changed" if wanted else "no longer declared")
            self.provisioner.remove(name)
        for name in recipes:
            row = self.store.sandbox(name)
            if row is None or (name in present and row.status != "creating"):
                continue
            if row.status not in ("absent", "hibernated"):  # a hibernated one has no container: made at resume
                detail = (f"its container was gone, or not yet ready, when the runtime started; session "
                          f"{shown(row.session)!r} has ended" if row.session else None)
                self.store.update(name, status="absent", session=None, bound_at=None, from_snapshot=None,
                                  paused_by=None, last_activity=None, detail=detail)
        self.reconciled = True

    def reconcile_quietly(self) -> None:
        try:
            self.reconcile()
        except (BackendError, requests.exceptions.RequestException) as error:
            log.warning("reconcile of on-demand sandboxes postponed: %s", error)
