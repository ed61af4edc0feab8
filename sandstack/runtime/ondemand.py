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
from typing import Any, Protocol

import docker
import requests

from sandstack.plan.recipe import LABEL_ONDEMAND, LABEL_RECIPE
from sandstack.runtime.backend import BackendError, DaemonUnavailable, SandboxNotRunning
from sandstack.runtime.errors import ApiError
from sandstack.runtime.readiness import Probe, probe_of, wait_ready
from sandstack.runtime.store import SandboxRow

log = logging.getLogger("sandstack.runtime")
QUIET = ("absent", "creating", "hibernated")  # rows the monitor's health check leaves alone
OUT_OF_SERVICE = ("quarantined", "expired", "unhealthy", "resetting")  # no session's, handed out to none


class Provisioner(Protocol):
    """What creating sandboxes needs from Docker, beside the runtime's backend."""

    def create(self, name: str, body: dict[str, Any]) -> None:
        """Create the container from the Engine API body and start it."""

    def health(self, name: str) -> tuple[str, str | None]:
        """(Docker's status, its health check's status or None when it has none)."""

    def probe(self, name: str) -> Probe | None:
        """Its readiness probe as Docker holds it (sandstack.runtime.readiness), None when it has none."""

    def remove(self, name: str) -> None:
        """Remove the container, running or not (its volumes stay: they are the stack's)."""

    def listed(self, labels: dict[str, str]) -> dict[str, str]:
        """Containers carrying every label: name → their recipe digest label."""


class DockerProvisioner:
    def __init__(self, backend: Any):
        self.backend = backend  # sandstack.runtime.docker_backend.DockerBackend: its connection and error mapping

    def create(self, name: str, body: dict[str, Any]) -> None:
        api = self.backend.api
        with self.backend.changing(name), _errors(name):
            # The body as the plan wrote it, in the Engine API's own terms: no SDK translation in between.
            api._result(api._post_json(api._url("/containers/create"), data=body, params={"name": name}), json=True)
            api.start(name)

    def health(self, name: str) -> tuple[str, str | None]:
        with _errors(name):
            state = self.backend.api.inspect_container(name)["State"]
        return state["Status"], (state.get("Health") or {}).get("Status")

    def probe(self, name: str) -> Probe | None:
        with _errors(name):
            config = self.backend.api.inspect_container(name)["Config"]
        return probe_of(config.get("Healthcheck"), config.get("WorkingDir"))

    def remove(self, name: str) -> None:
        with self.backend.changing(name), _errors(name):
            try:
                self.backend.api.remove_container(name, force=True)
            except docker.errors.NotFound:
                pass

    def listed(self, labels: dict[str, str]) -> dict[str, str]:
        with _errors("-"):
            found = self.backend.api.containers(all=True, filters={"label": [f"{k}={v}" for k, v in labels.items()]})
        return {c["Names"][0].lstrip("/"): (c.get("Labels") or {}).get(LABEL_RECIPE, "") for c in found}


def provisioner_for(backend: Any) -> Provisioner | None:
    """The backend's own (a test's stand-in has one), else Docker's through the backend's connection."""
    own = getattr(backend, "provisioner", None)
    if own is not None:
        return own
    return DockerProvisioner(backend) if hasattr(backend, "api") else None


def _errors(name: str):
    from sandstack.runtime.docker_backend import _docker_errors
    return _docker_errors(name)


class OnDemandPlaces:
    def __init__(self, runtime: Any, provisioner: Provisioner | None):
        self.runtime = runtime
        self.provisioner = provisioner
        self.reconciled = False

    def is_place(self, name: str) -> bool:
        row = self.runtime.store.sandbox(name)
        spec = self.runtime.config.pools.get(row.pool) if row else None
        return bool(spec and spec.ondemand and name in spec.ondemand.places)

    def _recipes(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """place → (pool, body) of every on-demand place of this host."""
        return {name: (pool, spec.ondemand.body(name)) for pool, spec in self.runtime.config.pools.items()
                if spec.ondemand for name in spec.ondemand.places}

    # Claims

    def claim(self, pool: str, session: str, from_snapshot: str | None = None) -> tuple[SandboxRow, bool] | None:
        """Bind a new sandbox of the pool to the session; None when the pool has no free place."""
        runtime, spec = self.runtime, self.runtime.pool(pool)
        if self.provisioner is None:
            raise ApiError(503, f"no capacity: pool {pool!r} on host {runtime.host!r} may create sandboxes on "
                                "demand, but this runtime has no Docker to create them with", pool=pool,
                           host=runtime.host)
        with runtime.store.transaction() as db:
            existing = runtime.store.by_session(session)
            if existing:  # a concurrent claim of the same session bound one meanwhile
                return existing, False
            free = [row for row in runtime.store.sandboxes(pool) if row.status == "absent"
                    and row.name in spec.ondemand.places]
            if not free:
                return None
            name = free[0].name
            runtime._enter(name)
            runtime.store.update(name, db, status="creating", session=session, bound_at=time.time(),
                                 from_snapshot=from_snapshot, paused_by=None, last_activity=time.time(), detail=None)
        try:
            self._create(name, spec.ondemand.body(name), spec.ondemand.wait_seconds)
            runtime.store.update(name, status="bound")
        except (BackendError, ApiError) as error:
            self._discard(name, f"its creation failed: {getattr(error, 'message', error)}")
            if isinstance(error, DaemonUnavailable):
                raise
            raise ApiError(503, f"no capacity: a sandbox of pool {pool!r} on host {runtime.host!r} could not be "
                                f"created on demand: {getattr(error, 'message', error)}", pool=pool,
                           host=runtime.host) from error
        finally:
            runtime._leave(name)
        return runtime.sandbox(name), True

    def recreate(self, name: str) -> None:
        """A hibernated place's container, made again from its recipe (its disk workspaces kept their files)."""
        spec = self.runtime.pool(self.runtime.sandbox(name).pool)
        self._create(name, spec.ondemand.body(name), spec.ondemand.wait_seconds)

    def shutdown(self) -> None:
        """The runtime is stopping (a restart, a renewal, or `pulumi destroy`, which it cannot tell apart): no
        on-demand container is left running without it. Bound ones hibernate (their files kept, resumed by the next
        call after the runtime is back), the others are retired; the stack's networks and volumes can then be
        deleted."""
        if self.provisioner is None:
            return
        for row in self.runtime.store.sandboxes():
            if not self.is_place(row.name) or row.status in ("absent", "hibernated"):
                continue
            try:
                if row.status in ("bound", "paused"):
                    self.runtime.hibernation.hibernate(row.name, by="shutdown")
                elif row.status == "creating":
                    self._discard(row.name, "the runtime stopped while it was created")
                else:
                    self.retire(row.name, detail="retired when the runtime stopped")
            except Exception as error:  # noqa: BLE001 -- each one on its own; the rest still go
                log.warning("shutdown: on-demand sandbox %s: %s; removing it", row.name, error)
                self._discard(row.name, f"removed when the runtime stopped ({type(error).__name__}); its session "
                                        "has ended")

    def at_ceiling(self, pool: str) -> ApiError:
        """503, naming the sandboxes out of service: a warm one being reset or repaired counts toward the ceiling
        though no session has it (a claim then finds the pool full before its ceiling's worth of sessions)."""
        spec = self.runtime.pool(pool)
        ceiling = spec.ondemand.ceiling
        out = [row for row in self.runtime.store.sandboxes(pool) if row.status in OUT_OF_SERVICE]
        why = "; ".join(f"{row.name} is {row.status}" + (f" ({row.detail})" if row.detail else "") for row in out)
        extra = {"out_of_service": {row.name: row.status for row in out}} if out else {}
        return ApiError(503, f"no capacity: pool {pool!r} on host {self.runtime.host!r} is at its ceiling of "
                             f"{ceiling} sandboxes ({len(spec.sandboxes)} warm, {len(spec.ondemand.places)} on "
                             "demand), none idle" + (f" ({len(out)} out of service: {why})" if out else ""),
                        pool=pool, host=self.runtime.host, ceiling=ceiling, **extra)

    def _create(self, name: str, body: dict[str, Any], wait_seconds: int) -> None:
        # A new container: its start is not a restart of the session's (the monitor compares StartedAt).
        self.runtime._started.pop(name, None)
        try:
            self.provisioner.create(name, body)
        except SandboxNotRunning:  # Docker's 409: the name is taken, by one a runtime stopped mid-creation left
            # Removed only then: a remove before every create cost each claim a Docker call (issue 22's ratio).
            self.provisioner.remove(name)
            self.provisioner.create(name, body)
        wait_ready(self.provisioner, self.runtime.backend, name, wait_seconds)

    def _discard(self, name: str, detail: str) -> None:
        try:
            self.provisioner.remove(name)
        except BackendError as error:
            log.warning("on-demand sandbox %s not removed: %s", name, error)
        self.runtime.store.update(name, status="absent", session=None, bound_at=None, from_snapshot=None,
                                  paused_by=None, last_activity=None, detail=detail)

    # Retiring

    def retire(self, name: str, detail: str | None = None) -> SandboxRow:
        """Empty its disk workspaces (as a reset does), then remove the container: the place is absent again. A
        failure quarantines it, as a reset's does; the monitor retires it later."""
        runtime = self.runtime
        with runtime.transition(name):
            runtime.store.update(name, status="resetting", session=None, paused_by=None)
            try:
                runtime.end_session(name)
                state = runtime.backend.state(name)
                if state.status != "missing":
                    runtime.stop_and_empty(name, state)
                self.provisioner.remove(name)
            except DaemonUnavailable:
                raise
            except BackendError as error:
                runtime._quarantine(name, error)
                return runtime.sandbox(name)
            runtime._cpu.pop(name, None)
            runtime.store.update(name, status="absent", session=None, bound_at=None, from_snapshot=None,
                                 paused_by=None, last_activity=None, detail=detail)
        return runtime.sandbox(name)

    # The monitor's part

    def tend(self, row: SandboxRow) -> bool:
        """The monitor's pass over one row: True when this module dealt with it (the health check skips it)."""
        if not self.reconciled:
            self.reconcile()
        if not self.is_place(row.name):
            return row.status in QUIET
        row = self.runtime.store.sandbox(row.name) or row  # as it is now: a claim may have bound it since the list
        if row.status in QUIET:
            return True
        if row.status in ("unhealthy", "quarantined", "resetting", "idle", "expired"):
            # Nothing of a session is in it (or it is lost): retired, as a release would.
            self.retire(row.name, detail=row.detail)
            return True
        return False

    def reconcile(self) -> None:
        """The store against Docker, after a start (or a failed one): see the module's docstring."""
        runtime = self.runtime
        if self.provisioner is None:
            self.reconciled = True
            return
        recipes = self._recipes()
        # This stack's and host's on-demand containers (the labels the plan gives the runtime: its stack and host).
        labels = runtime.config.ondemand_labels
        present = self.provisioner.listed({**labels, LABEL_ONDEMAND: "true"})
        if not labels:
            # A configuration without them (made by hand, not by the plan) cannot tell its containers from another
            # stack's on the same daemon: only its own places' names (they name the stack) are its own.
            present = {name: digest for name, digest in present.items() if name in recipes}
        for name, digest in present.items():
            row = runtime.store.sandbox(name)
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
            row = runtime.store.sandbox(name)
            if row is None or (name in present and row.status != "creating"):
                continue
            if row.status not in ("absent", "hibernated"):  # a hibernated one has no container: made at resume
                detail = (f"its container was gone, or not yet ready, when the runtime started; session "
                          f"{row.session!r} has ended" if row.session else None)
                runtime.store.update(name, status="absent", session=None, bound_at=None, from_snapshot=None,
                                     paused_by=None, last_activity=None, detail=detail)
        self.reconciled = True

    def reconcile_quietly(self) -> None:
        try:
            self.reconcile()
        except (BackendError, requests.exceptions.RequestException) as error:
            log.warning("reconcile of on-demand sandboxes postponed: %s", error)
