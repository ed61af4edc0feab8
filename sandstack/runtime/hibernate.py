"""Hibernation: a bound session's sandbox stopped, its files kept, brought back on the session's next use
(docs/design/ondemand.md).

A hibernate (`POST /v1/sessions/{session}/hibernate`, or the idle action 'hibernate') copies the sandbox's tmpfs
writable paths onto the runtime's state volume (checked as a snapshot is: sandstack.runtime.tarcheck) and stops
the container: its processes end and its memory and CPU are the host's again. Its disk workspaces keep their files
on their volumes. The sandbox stays the session's ('hibernated'): no other session is given it, and for an
on-demand place it still counts toward the pool's ceiling (its disk is still held), and its container is removed
(made again from the place's recipe at resume). A resume (`POST .../resume`, any
exec, file, archive or snapshot call on the sandbox, or a request to one of its URLs through the ingress, which
calls the runtime) starts the container, writes the tmpfs paths back and waits for its readiness probe. Processes
are not kept: `docker checkpoint` (CRIU) needs the daemon's experimental mode, which this project's engine does not
run (docs/design/ondemand.md says what that means). Everything is on the state volume and in SQLite, so a
hibernated session survives a restart of the runtime.
"""

from __future__ import annotations

import logging
import shutil
import tarfile
import threading
import time
from pathlib import Path

from sandstack.plan.runtime import PoolRuntime
from sandstack.runtime import scripts, secret_files
from sandstack.runtime.backend import BackendError, DaemonUnavailable, SandboxBackend
from sandstack.runtime.errors import ApiError, conflict
from sandstack.runtime.interfaces import (Copies, Credentials, Execs, Leases, Places, Readiness, Sandboxes, Storage,
                                          Transfers)
from sandstack.runtime.room import Room
from sandstack.runtime.store import SandboxRow
from sandstack.runtime.tarcheck import Checked, Forged, PastBound, TooDeep, write_tar

log = logging.getLogger("sandstack.runtime")


class Hibernation:
    def __init__(self, sandboxes: Sandboxes, transfers: Transfers, execs: Execs, credentials: Credentials,
                 places: Places, storage: Storage, copies: Copies, leases: Leases, backend: SandboxBackend,
                 readiness: Readiness):
        self.sandboxes, self.transfers, self.execs, self.credentials = sandboxes, transfers, execs, credentials
        self.places, self.storage, self.copies, self.leases = places, storage, copies, leases
        self.backend, self.readiness = backend, readiness
        # One resume of a sandbox at a time: the wakes of a site's first requests (the ingress asks one per request),
        # an API call and the session's own resume arrive together; the first brings the sandbox back, the others
        # wait on it and find it bound. Concurrent resumes each started or created the container (Docker's 409 for
        # the name, a second container removing the first's): 60 first requests waited up to 47 s on the engine.
        self._resuming: dict[str, threading.Lock] = {}
        self._resuming_lock = threading.Lock()
        # Called with a resumed sandbox's name once it runs again, before it is bound: what follows its container
        # (its network profile's record, by its address, which a start may change). One that raises fails the resume.
        self.on_resumed: list = []

    def hibernate(self, name: str, by: str = "api") -> SandboxRow:
        sandboxes = self.sandboxes
        row = sandboxes.get(name)
        if row.status == "hibernated":
            return self._hibernated(row, by)
        if row.status == "paused":
            sandboxes.resume(name)
        elif row.status != "bound":
            raise conflict(f"sandbox {name!r} is {row.status}; only a bound sandbox can hibernate", sandbox=name,
                           status=row.status)
        with self.leases.pause(name), sandboxes.transition(name):  # 409 while an exec or a transfer runs
            row = sandboxes.get(name)  # as it is now: the monitor's idle hibernation may have come first
            if row.status == "hibernated":
                return self._hibernated(row, by)
            if row.status != "bound":
                raise conflict(f"sandbox {name!r} is {row.status}; only a bound sandbox can hibernate", sandbox=name,
                               status=row.status)
            spec = sandboxes.pool(row.pool)
            target = self.copies.path(name)
            shutil.rmtree(target, ignore_errors=True)
            # Counted against the pool's snapshot_storage and the session's share, reserved while it is copied
            # (sandstack.runtime.storage): it was counted nowhere. And, for a pool that counts its hibernated
            # sessions apart, against max_hibernated (409 past it: sandstack.runtime.ceilings).
            with self.places.hibernating(name, by), self.storage.room(row.pool, row.session) as room:
                target.mkdir()
                try:
                    self._copy(name, spec, target, room)
                except OSError as error:
                    shutil.rmtree(target, ignore_errors=True)
                    raise self.transfers.storage_error(error, f"hibernating sandbox {name!r}") from error
                except BaseException:
                    shutil.rmtree(target, ignore_errors=True)
                    raise
                self._stop(name)
                sandboxes.store.update(name, status="hibernated", paused_by=by, detail=None)
        return sandboxes.get(name)

    def _copy(self, name: str, spec: PoolRuntime, target: Path, room: Room) -> None:
        """The tmpfs paths' files into `target`, within the room and each path's declared size; sparse files stay
        sparse (a 1,000 MB sparse file in a 16 MiB /tmp was copied at its full length)."""
        declared = self.backend.tmpfs_sizes(name)  # path → its size as the container was made (Docker's)
        left = room.bound
        for index, writable in enumerate(spec.writable):
            if writable.kind != "tmpfs":
                continue  # a disk workspace keeps its files on its volume
            size = declared.get(writable.path)
            stored = target / f"{index}.tar"
            with open(stored, "wb") as out:
                try:
                    self.transfers.relay(name, writable.path, left, lambda entries: write_tar(entries, out),
                                         "hibernating", skip=writable.keep, sparse=True, data_limit=size)
                except PastBound as error:
                    if size is not None and error.limit == size < left:
                        raise conflict(f"hibernating sandbox {name!r}: the files at {writable.path!r} take more than "
                                       f"the path's declared size of {size} bytes (a sparse file counts at its full "
                                       "length where the sandbox's tar cannot store holes, as busybox's cannot); it "
                                       "was not hibernated", sandbox=name, path=writable.path, size=size) from error
                    raise room.past(f"the copy of sandbox {name!r} for its hibernation", error, sandbox=name) \
                        from error
            left -= stored.stat().st_size
            if left < 0:
                raise room.past(f"the copy of sandbox {name!r} for its hibernation", PastBound(room.bound),
                                sandbox=name)

    def _stop(self, name: str) -> None:
        if self.places.is_place(name):
            # Removed, not only stopped: its disk workspaces stay on their volumes (the stack's), and no container of
            # it is left to keep a network or a volume of the stack from being deleted.
            self.places.remove(name)
        else:
            self.backend.stop(name)

    def _hibernated(self, row: SandboxRow, by: str) -> SandboxRow:
        """A sandbox hibernated already (by the idle policy, or the runtime's stop): a request of the API's own is
        answered as its own, `paused_by: api`; the runtime's own hibernations change nothing."""
        if by == "api" and row.paused_by != "api":
            self.sandboxes.store.update_if(row.name, {"status": "hibernated", "session": row.session},
                                           paused_by="api")
            return self.sandboxes.get(row.name)
        return row

    def resume(self, name: str) -> SandboxRow:
        with self._resuming_lock:
            lock = self._resuming.setdefault(name, threading.Lock())
        with lock:
            return self._resume(name)

    def wake(self, name: str) -> bool:
        """A site's wake (sandstack.runtime.routes.wake): its hibernated or paused sandbox back; whether this call
        woke it (False: it was bound already, or a wake it waited on brought it back)."""
        with self._resuming_lock:
            lock = self._resuming.setdefault(name, threading.Lock())
        with lock:
            status = self.sandboxes.get(name).status
            if status in ("hibernated", "paused"):
                self._resume(name)
            return status in ("hibernated", "paused")

    def _resume(self, name: str) -> SandboxRow:
        sandboxes = self.sandboxes
        row = sandboxes.get(name)  # as it is now: a resume this one waited on may have brought it back
        if row.status in ("bound", "paused"):
            return sandboxes.resume(name) if row.status == "paused" else row
        if row.status != "hibernated":
            raise conflict(f"sandbox {name!r} is {row.status}; only a hibernated or paused sandbox can be resumed",
                           sandbox=name, status=row.status)
        spec = sandboxes.pool(row.pool)
        # Room under the running ceiling, for a pool that counts its hibernated sessions apart (409: it stays so).
        with self.places.resuming(name), sandboxes.transition(name):
            sandboxes.forget_run(name)  # started again by the session's own resume, not a crash's restart
            if self.places.is_place(name) and self.backend.state(name).status == "missing":
                self.places.recreate(name)  # from its recipe, onto its kept disk workspaces
            else:
                self.backend.start(name)
            try:
                self.readiness.started(name, spec)
                self._write_back(name, spec)
                files = self.credentials.files(name)
                if files:  # the tmpfs is new with the container: the session's secret files, from memory again
                    secret_files.write(self.execs, name, files)
                for hook in self.on_resumed:
                    hook(name)
            except (ApiError, BackendError) as error:
                failed = self._failed(name, error)
                if isinstance(error, DaemonUnavailable):
                    raise  # 503, as every call while Docker does not answer; the detail says what was done
                raise failed from error
            sandboxes.store.update(name, status="bound", paused_by=None, last_activity=time.time(), detail=None)
            self.copies.discard(name)
        return sandboxes.get(name)

    def _write_back(self, name: str, spec: PoolRuntime) -> None:
        saved = self.copies.path(name)
        for index, writable in enumerate(spec.writable):
            stored = saved / f"{index}.tar"
            if writable.kind != "tmpfs" or not stored.exists():
                continue
            with open(stored, "rb") as raw, self.transfers.spool() as tar:
                try:
                    with tarfile.open(fileobj=raw, mode="r|") as entries:
                        write_tar(Checked(entries, stored.stat().st_size, sparse=True), tar)
                except (Forged, TooDeep, tarfile.TarError) as error:
                    raise ApiError(502, f"its copy of {writable.path!r} is not a tar this runtime wrote ({error})",
                                   sandbox=name) from error
                tar.seek(0)
                code, stderr = self.execs.run(name, scripts.sh(scripts.RESTORE, *writable.keep), writable.path,
                                              stdin=tar)
            if code != 0:
                raise ApiError(502, f"its files at {writable.path!r} could not be written back (exit {code}): "
                                    f"{stderr[-300:]}", sandbox=name)

    def _failed(self, name: str, error: ApiError | BackendError) -> ApiError:
        """A resume that failed once the container was started: stopped (removed, on demand) again, so the session
        stays hibernated with its copy, as it was, never running under `hibernated`; the answer says so."""
        why = error.message if isinstance(error, ApiError) else str(error)
        stopped = "it was stopped again"
        try:
            self._stop(name)
        except BackendError as stop_error:  # the monitor stops it at its next pass (tend)
            stopped = f"stopping it failed too ({stop_error}), and the monitor stops it"
        detail = f"its last resume failed ({why}); {stopped}; it keeps its files: resume again, or release"
        self.sandboxes.store.update(name, detail=detail)
        log.warning("sandbox %s: %s", name, detail)
        return ApiError(502, f"resuming sandbox {name!r} failed: {why}; {stopped} and it stays hibernated with its "
                             "files (resume again, or release the session)", sandbox=name, status="hibernated")

    def tend(self, row: SandboxRow) -> None:
        """The monitor's pass over a hibernated sandbox: a container left running under `hibernated` (a resume that
        failed, then could not stop it) is stopped again."""
        if self.backend.state(row.name).status in ("running", "restarting", "paused"):
            log.warning("monitor: sandbox %s is hibernated but its container runs: stopping it", row.name)
            if self.backend.state(row.name).status == "paused":
                self.backend.unpause(row.name)
            self._stop(row.name)

    def discard(self, name: str) -> None:
        """What a hibernation kept, once the session has ended (released, reset, retired)."""
        self.copies.discard(name)
