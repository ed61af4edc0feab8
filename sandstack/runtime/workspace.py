"""Files, archives and snapshots of a bound sandbox's workspace, all moved with `exec` as the sandbox's own
user (sandstack.runtime.scripts), so tmpfs paths are seen as the sandbox sees them and nothing is read or
written with more rights than the sandbox has."""

from __future__ import annotations

import gzip
import re
import shutil
import tarfile
import tempfile
import time
import uuid
import zipfile
from pathlib import Path
from typing import IO, BinaryIO, Protocol

from sandstack.plan.runtime import SNAPSHOT_DIR, PoolRuntime, RuntimeConfig
from sandstack.runtime import scripts
from sandstack.runtime.backend import BackendError, CappedBuffer, SandboxGone, SandboxNotRunning
from sandstack.runtime.errors import ApiError, conflict, forbidden
from sandstack.runtime.leases import Leases, holding
from sandstack.runtime.models import SNAPSHOT_PATTERN
from sandstack.runtime.store import SandboxRow, SnapshotRow, Store


class Runtime(Protocol):
    """What files and snapshots use of the runtime service (sandstack.runtime.service.Runtime), which creates
    the Workspace: named here so that this module does not import the service that imports it."""

    config: RuntimeConfig
    host: str
    state_dir: Path
    store: Store
    leases: Leases

    def pool(self, name: str) -> PoolRuntime: ...
    def sandbox(self, name: str) -> SandboxRow: ...
    def usable(self, name: str) -> SandboxRow: ...
    def died(self, row: SandboxRow, error: BackendError) -> ApiError: ...
    def _run_internal(self, name: str, argv: list[str], workdir: str, *, stdin=None, stdout=None,
                      timeout: float = 300) -> tuple[int | None, str]: ...


SPOOL = 8 * 1024 * 1024  # bytes kept in memory before a transfer spills to a file under the state dir
SNAPSHOT_ID = re.compile(SNAPSHOT_PATTERN.removeprefix("^").removesuffix("$"))
ARCHIVE_FORMATS = {"tar.gz": "application/gzip", "zip": "application/zip"}


def clean_path(path: str) -> str:
    """`path` relative to the workspace root, normalised ('' is the root); refuses what could name anything
    outside it before the sandbox is asked."""
    if "\0" in path:
        raise forbidden(path, "contains a NUL byte")
    if path.startswith("/"):
        raise forbidden(path, "is absolute; give a path relative to the workspace root")
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise forbidden(path, "contains '..'")
    return "/".join(parts)


class Workspace:
    def __init__(self, runtime: Runtime):
        self.runtime = runtime
        self.leases = runtime.leases
        self.snapshot_dir = runtime.state_dir / SNAPSHOT_DIR
        self.snapshot_dir.mkdir(parents=True, exist_ok=True)
        self.spool_dir = runtime.state_dir / "spool"
        self.spool_dir.mkdir(parents=True, exist_ok=True)

    def spool(self) -> tempfile.SpooledTemporaryFile:
        return tempfile.SpooledTemporaryFile(max_size=SPOOL, dir=self.spool_dir)

    def _run(self, name: str, argv: list[str], workdir: str, *, stdin: BinaryIO | None = None,
             stdout: IO[bytes] | CappedBuffer | None = None) -> tuple[int | None, str]:
        row = self.runtime.sandbox(name)
        try:
            return self.runtime._run_internal(name, argv, workdir, stdin=stdin, stdout=stdout)
        except (SandboxNotRunning, SandboxGone) as error:
            raise self.runtime.died(row, error) from error

    def _root(self, name: str) -> str:
        return self.runtime.pool(self.runtime.usable(name).pool).workspace_root

    def _fail(self, code: int | None, stderr: str, path: str, name: str, doing: str) -> ApiError:
        root = self.runtime.pool(self.runtime.sandbox(name).pool).workspace_root
        if code == scripts.OUTSIDE_ROOT:
            return forbidden(path, f"leads outside the workspace root {root!r}")
        if code == scripts.SPECIAL_FILE:
            return forbidden(path, "is a device, fifo or socket")
        if code == scripts.NOT_READABLE:
            return forbidden(path, "is not readable by the sandbox's user (its mode forbids it)")
        if code == scripts.NOT_FOUND:
            return ApiError(404, f"file {path!r} does not exist in sandbox {name!r}", path=path, sandbox=name)
        if code == scripts.IS_DIRECTORY:
            return conflict(f"path {path!r} is a directory", path=path)
        if code == scripts.NOT_DIRECTORY:
            return conflict(f"a parent of path {path!r} is not a directory", path=path)
        if code is None:
            return ApiError(504, f"{doing} {path!r} in sandbox {name!r} did not finish in time", path=path)
        return conflict(f"{doing} {path!r} failed in sandbox {name!r} (exit {code}): {stderr or 'no message'}",
                        path=path)

    # Files

    @holding  # no pause while it runs
    def read(self, name: str, path: str) -> tuple[IO[bytes] | None, list[dict[str, object]] | None]:
        """(the file's bytes, None), or (None, the directory's entries)."""
        rel = clean_path(path)
        root = self._root(name)
        out = self.spool()
        code, stderr = self._run(name, scripts.sh(scripts.READ, rel or "."), root, stdout=out)
        out.seek(0)
        if code == scripts.IS_DIRECTORY:
            entries = []
            for record in out.read().split(b"\0"):
                if record:
                    kind, size, entry = record.decode(errors="replace").split(" ", 2)
                    entries.append({"name": entry, "type": kind, "size": int(size) if size.isdigit() else 0})
            return None, sorted(entries, key=lambda e: e["name"])
        if code != 0:
            raise self._fail(code, stderr, path, name, "reading")
        return out, None

    @holding  # no pause while it runs
    def write(self, name: str, path: str, body: BinaryIO) -> None:
        rel = clean_path(path)
        if not rel:
            raise forbidden(path, "is the workspace root")
        code, stderr = self._run(name, scripts.sh(scripts.WRITE, rel), self._root(name), stdin=body)
        if code != 0:
            raise self._fail(code, stderr, path, name, "writing")

    @holding  # no pause while it runs
    def delete(self, name: str, path: str) -> None:
        rel = clean_path(path)
        if not rel:
            raise forbidden(path, "is the workspace root")
        code, stderr = self._run(name, scripts.sh(scripts.DELETE, rel), self._root(name))
        if code != 0:
            raise self._fail(code, stderr, path, name, "deleting")

    def upload_limit(self, name: str) -> int:
        return self.runtime.pool(self.runtime.sandbox(name).pool).upload_limit_bytes

    # Archive: the workspace, as the download of a session's work

    @holding  # no pause while it runs
    def archive(self, name: str, fmt: str) -> IO[bytes]:
        if fmt not in ARCHIVE_FORMATS:
            raise ApiError(422, f"format {fmt!r} is not one of {', '.join(ARCHIVE_FORMATS)}")
        root = self._root(name)
        raw = self.spool()
        code, stderr = self._run(name, scripts.sh(scripts.TAR_CREATE), root, stdout=raw)
        if code != 0:
            raise self._fail(code, stderr, root, name, "archiving")
        raw.seek(0)
        out = self.spool()
        if fmt == "tar.gz":
            with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as packed:
                shutil.copyfileobj(raw, packed)
        else:
            with tarfile.open(fileobj=raw, mode="r|") as tar, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
                for member in tar:
                    # A zip holds files and directories; links and special files are left out.
                    entry = member.name.removeprefix("./")
                    if member.isdir() and entry not in ("", "."):
                        zf.writestr(entry.rstrip("/") + "/", b"")
                    elif member.isfile():
                        zf.writestr(zipfile.ZipInfo(entry, time.gmtime(member.mtime)[:6]),
                                    tar.extractfile(member).read())
        out.seek(0)
        return out

    # Snapshots: a tar of each writable path, stored under the state dir

    def snapshot_row(self, snapshot_id: str, pool: str | None = None) -> SnapshotRow:
        row = self.runtime.store.snapshot(snapshot_id) if SNAPSHOT_ID.fullmatch(snapshot_id) else None
        if row is None:
            raise ApiError(404, f"snapshot {snapshot_id!r} is not on host {self.runtime.host!r}",
                           snapshot=snapshot_id, host=self.runtime.host)
        if pool is not None and row.pool != pool:
            raise conflict(f"snapshot {snapshot_id!r} is of pool {row.pool!r}, not {pool!r}",
                           snapshot=snapshot_id, pool=row.pool)
        return row

    @holding  # no pause while it runs
    def snapshot(self, name: str) -> SnapshotRow:
        sandbox = self.runtime.usable(name)
        spec = self.runtime.pool(sandbox.pool)
        if not spec.writable:
            raise conflict(f"pool {sandbox.pool!r} has no writable paths to snapshot", pool=sandbox.pool)
        snapshot_id = f"snap-{uuid.uuid4().hex}"
        target = self.snapshot_dir / snapshot_id
        target.mkdir()
        try:
            for index, writable in enumerate(spec.writable):
                with open(target / f"{index}.tar", "wb") as out:
                    code, stderr = self._run(name, scripts.sh(scripts.TAR_CREATE), writable.path, stdout=out)
                if code != 0:
                    raise self._fail(code, stderr, writable.path, name, "snapshotting")
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        size = sum(f.stat().st_size for f in target.iterdir())
        row = SnapshotRow(snapshot_id, sandbox.pool, name, sandbox.session, time.time(), size,
                          "\n".join(w.path for w in spec.writable))
        self.runtime.store.add_snapshot(row)
        self.apply_retention(time.time())
        return row

    @holding  # no pause while it runs
    def restore(self, name: str, snapshot_id: str) -> SnapshotRow:
        sandbox = self.runtime.usable(name)
        snap = self.snapshot_row(snapshot_id, sandbox.pool)
        paths = snap.paths.split("\n")
        declared = [w.path for w in self.runtime.pool(sandbox.pool).writable]
        if paths != declared:
            raise conflict(f"snapshot {snapshot_id!r} holds writable paths {paths}, but pool {sandbox.pool!r} now "
                           f"has {declared}", snapshot=snapshot_id)
        for index, path in enumerate(paths):
            with open(self.snapshot_dir / snapshot_id / f"{index}.tar", "rb") as tar:
                code, stderr = self._run(name, scripts.sh(scripts.RESTORE), path, stdin=tar)
            if code != 0:
                raise self._fail(code, stderr, path, name, "restoring")
        return snap

    def delete_snapshot(self, snapshot_id: str) -> None:
        self.snapshot_row(snapshot_id)
        self.runtime.store.delete_snapshot(snapshot_id)
        shutil.rmtree(self.snapshot_dir / snapshot_id, ignore_errors=True)

    def apply_retention(self, now: float) -> list[str]:
        """Deletes each pool's snapshots beyond its count or older than its max age; returns their ids."""
        removed = []
        for pool, spec in self.runtime.config.pools.items():
            for index, snap in enumerate(self.runtime.store.snapshots(pool=pool)):
                too_many = index >= spec.retention.count
                too_old = now - snap.created_at > spec.retention.max_age_seconds
                if too_many or too_old:
                    self.delete_snapshot(snap.id)
                    removed.append(snap.id)
        return removed
