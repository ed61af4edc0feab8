"""A writable root in snapshots (`read_only_root: false`): a snapshot keeps the root's changes beside its writable
paths' tars, a restore (API or a claim's `from_snapshot`) brings them back (docs/design/runtime.md).

What a snapshot keeps is the container's overlay upper directory as a tar (the backend's `read_root`,
sandstack.runtime.rootfs): new and changed files with their owners and modes, and a whiteout (a character device
0/0) for each image file the session removed. It is read while the container runs, so like the writable paths' tars
it is not one instant's copy of a root that is being changed. The stream is checked as it comes, as a writable
path's is (sandstack.runtime.tarcheck) but for a whole root: an absolute or `..` name, or one under a symlink of the
same stream, is a forgery; a symlink may point anywhere (the root's `/etc/alternatives` do; nothing follows it on this
side, and the extracting `tar` creates links after files); devices other than whiteouts are left out. It counts
against the snapshot's bound like the other tars and is stored as `root.tar`; the snapshot's row lists `/` among its
paths (no new column: state files of older runtimes read as they are).

A restore into a writable-root template stops the container (the session's processes end), empties its root to the
image (the backend's `reset_root`), writes the snapshot's root back if it has one (one without gives the image's
root: the session sees the snapshot's state, not the one before), starts it and waits for it to run; the writable
paths are restored after, as always. A failure from the stop on leaves nothing half-done: a claim fails and its
sandbox is reset (sandstack.runtime.sessions), an API restore releases the session (its sandbox reset, or quarantined
if that fails: sandstack.runtime.sessions, on `RootRestoreFailed`) and answers 502 saying so.
"""

from __future__ import annotations

import tarfile
from contextlib import nullcontext
from pathlib import Path
from typing import IO

from sandstack.runtime import secret_files
from sandstack.runtime.backend import BackendError, SandboxBackend
from sandstack.runtime.errors import ApiError, conflict
from sandstack.runtime.interfaces import Credentials, Execs, Leases, Processes, Readiness, Sandboxes, Transfers
from sandstack.runtime.tarcheck import Bounded, Checked, Forged, PastBound, SinkFailed, TooDeep, relay_tar, write_tar

ROOT_PART = "/"  # among a snapshot row's paths: it holds the root's changes too
ROOT_TAR = "root.tar"
STOPPED_WHY = "a restore of a snapshot stopped the sandbox to write its root back"


def parts(paths: str) -> tuple[list[str], bool]:
    """A snapshot row's `paths`: (its writable paths, whether it holds the root)."""
    listed = paths.split("\n") if paths else []
    return [p for p in listed if p != ROOT_PART], ROOT_PART in listed


class RootChecked(Checked):
    """The entries of a root's tar stream; see the module's text. Beside a workspace's entries: fifos, symlinks
    wherever they point (the root's own, read as the sandbox reads them), and overlay's whiteouts."""

    def keeps(self, member: tarfile.TarInfo, name: str, files: set[str]) -> bool:
        if member.isfifo() or member.issym():
            return True
        if member.ischr() and member.devmajor == 0 and member.devminor == 0:
            return True  # a whiteout: the image's file at this name was removed
        return super().keeps(member, name, files)


class RootRestoreFailed(Exception):
    """An API restore failed from the stop of the container on: the session must end (its sandbox reset)."""

    def __init__(self, error: ApiError | BackendError, session: str | None):
        super().__init__(str(error))
        self.error, self.session = error, session


def read(backend: SandboxBackend, name: str, limit: int, out: IO[bytes]) -> None:
    """The root's changes of sandbox `name`, checked, as a tar on `out`; PastBound past `limit` bytes."""
    relayed = relay_tar(lambda writer: backend.read_root(name, Bounded(writer, limit)),
                        lambda tar: write_tar(RootChecked(tar, limit), out),  # type: ignore[arg-type]
                        f"sandstack-root-{name}")
    error, failure = relayed.error, relayed.failure
    if isinstance(error, PastBound) or isinstance(failure, PastBound):
        raise PastBound(limit)
    if error is not None and not isinstance(error, SinkFailed):
        raise error
    if isinstance(failure, (Forged, tarfile.TarError)):
        raise ApiError(502, f"snapshotting the writable root of sandbox {name!r}: its stream is not a tar of a "
                            f"root's changes ({failure}); nothing of it was kept", sandbox=name)
    if isinstance(failure, TooDeep):
        raise conflict(f"snapshotting the writable root of sandbox {name!r}: it holds {failure}; nothing of it was "
                       "kept", sandbox=name)
    if isinstance(error, SinkFailed) and failure is None:
        raise error.error
    if failure is not None:
        raise failure


class RootSnapshots:
    def __init__(self, sandboxes: Sandboxes, transfers: Transfers, processes: Processes, credentials: Credentials,
                 execs: Execs, readiness: Readiness, leases: Leases):
        self.sandboxes, self.transfers, self.processes = sandboxes, transfers, processes
        self.credentials, self.execs, self.readiness, self.leases = credentials, execs, readiness, leases

    def read(self, name: str, limit: int, out: IO[bytes]) -> None:
        read(self.sandboxes.backend, name, limit, out)

    def restore(self, name: str, snapshot_id: str, stored: Path | None, *, claiming: bool) -> None:
        """The root of bound sandbox `name` as in `stored` (a snapshot's root.tar), or as in its image when None;
        the container is stopped and started again. `claiming`: the caller (a claim) resets the sandbox on a
        failure; else RootRestoreFailed once the container was stopped (the caller ends the session)."""
        with self.transfers.spool() as tar:
            if stored is not None:
                # Checked before anything changes: a snapshot that fails the check leaves the session as it was.
                with open(stored, "rb") as raw:
                    try:
                        with tarfile.open(fileobj=raw, mode="r|") as entries:
                            write_tar(RootChecked(entries, stored.stat().st_size), tar)  # type: ignore[arg-type]
                    except (Forged, TooDeep, tarfile.TarError) as error:
                        raise conflict(f"snapshot {snapshot_id!r} cannot be restored: its tar of the root is not a "
                                       f"root's changes ({error})", snapshot=snapshot_id) from error
                tar.seek(0)
            session = self.sandboxes.get(name).session
            # No exec or transfer runs while the container is stopped (one would end the session as a crash): 409.
            with (nullcontext() if claiming else self.leases.restoring(name)), self.sandboxes.transition(name):
                try:
                    self._rewrite(name, tar if stored is not None else None)
                except (ApiError, BackendError) as error:
                    if claiming:
                        raise
                    raise RootRestoreFailed(error, session) from error

    def _rewrite(self, name: str, tar: IO[bytes] | None) -> None:
        sandboxes, backend = self.sandboxes, self.sandboxes.backend
        spec = sandboxes.pool(sandboxes.get(name).pool)
        self.processes.end_session(name, STOPPED_WHY)
        if backend.state(name).status in ("running", "restarting"):
            backend.stop(name)
        backend.reset_root(name)
        if tar is not None:
            backend.write_root(name, tar)
        sandboxes.forget_run(name)  # started again by this restore, not by a crash's restart policy
        backend.start(name)
        self.readiness.started(name, spec)
        files = self.credentials.files(name)
        if files:  # the tmpfs is new with the start: the session's secret files, from memory again
            secret_files.write(self.execs, name, files)
