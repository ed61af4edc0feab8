"""Files, archives and snapshots of a bound sandbox's workspace, all moved with `exec` as the sandbox's own
user (sandstack.runtime.scripts), so tmpfs paths are seen as the sandbox sees them and nothing is read or
written with more rights than the sandbox has."""

from __future__ import annotations

import errno
import gzip
import re
import tarfile
import tempfile
import time
import uuid
from pathlib import Path, PurePosixPath
from typing import IO, BinaryIO, Callable, Protocol

from sandstack.plan.runtime import SNAPSHOT_DIR, PoolRuntime, RuntimeConfig, WritablePath
from sandstack.runtime import scripts
from sandstack.runtime.backend import BackendError, CappedBuffer, SandboxBackend, SandboxGone, SandboxNotRunning
from sandstack.runtime.errors import ApiError, conflict, forbidden, no_space, too_big
from sandstack.runtime.leases import Leases, holding
from sandstack.runtime.snapshots import Snapshots
from sandstack.runtime.storage import Storage
from sandstack.runtime.store import SandboxRow, Store
from sandstack.runtime.tarcheck import (MAX_DEPTH, MAX_NAME, Bounded, Checked, DeadlinePassed, Forged, PastBound,
                                        SinkFailed, TooDeep, relay_tar, shorten, write_tar, write_zip)


class Runtime(Protocol):
    """What files and snapshots use of the runtime service (sandstack.runtime.service.Runtime), which creates
    the Workspace: named here so that this module does not import the service that imports it."""

    config: RuntimeConfig
    host: str
    state_dir: Path
    store: Store
    leases: Leases
    backend: SandboxBackend

    def pool(self, name: str) -> PoolRuntime: ...
    def sandbox(self, name: str) -> SandboxRow: ...
    def usable(self, name: str) -> SandboxRow: ...
    def died(self, row: SandboxRow, error: BackendError) -> ApiError: ...
    def _run_internal(self, name: str, argv: list[str], workdir: str, *, stdin=None, stdout=None,
                      timeout: float = 300) -> tuple[int | None, str]: ...
    def live_markers(self) -> list[str]: ...
    def _mark(self, marker: str) -> None: ...
    def _unmark(self, marker: str) -> None: ...


SPOOL = 8 * 1024 * 1024  # bytes kept in memory before a transfer spills to a file under the state dir
KILL_TIMEOUT = 15  # seconds for the exec that ends a transfer cut off at its bound
# Seconds an archive, a snapshot or a hibernation's copy may take: the deadline of the exec that reads the tree and
# of the check of what it sends (the request's thread waits on both).
TRANSFER_TIMEOUT = 300
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
    clean = "/".join(parts)
    # The bounds of every copied tree (tarcheck): a 3,000-level path made its directories, failed its write (409),
    # and left a tree no archive or snapshot could copy.
    size = len(clean.encode(errors="surrogateescape"))
    if len(parts) > MAX_DEPTH or size > MAX_NAME:
        raise ApiError(422, f"path {shorten(path)!r} has {len(parts)} levels and {size} bytes; a path may have at most "
                            f"{MAX_DEPTH} levels and {MAX_NAME} bytes", path=shorten(path), levels=len(parts),
                       size=size)
    return clean


def _skipped(writable: tuple[WritablePath, ...], root: str) -> list[str]:
    """What an archive of `root` leaves out, relative to it: each disk workspace's own `lost+found` under it."""
    base = PurePosixPath(root)
    skipped = []
    for w in writable:
        for name in w.keep:
            path = PurePosixPath(w.path, name)
            if path.is_relative_to(base):
                skipped.append(str(path.relative_to(base)))
    return skipped


def listing(data: bytes) -> list[dict[str, object]]:
    """The entries of scripts.READ's directory records, by name."""
    entries = []
    for record in data.split(b"\0"):
        if record:
            kind, size, perms, entry = record.decode(errors="replace").split(" ", 3)
            entries.append({"name": entry, "type": kind, "size": int(size) if size.isdigit() else 0,
                            "mode": mode_bits(perms)})
    return sorted(entries, key=lambda e: e["name"])


def mode_bits(perms: str) -> str | None:
    """ls's `drwxr-sr-t` as chmod's octal `3755`-style text (four digits); None when ls gave no mode."""
    if len(perms) < 10:
        return None
    bits = 0
    for index, char in enumerate(perms[1:10]):
        if char not in "-STl":
            bits |= 1 << (8 - index)
    special = {3: (0o4000, "sS"), 6: (0o2000, "sSl"), 9: (0o1000, "tT")}
    for index, (bit, chars) in special.items():
        if perms[index] in chars:
            bits |= bit
    return f"{bits:04o}"


class _Trailed:
    """A whole body, then scripts.WRITE's trailer."""

    def __init__(self, body: BinaryIO, nonce: str):
        self.body, self.nonce, self.count, self.ended = body, nonce, 0, False

    def read(self, size: int = -1) -> bytes:
        chunk = self.body.read(size)
        if chunk:
            self.count += len(chunk)
            return chunk
        if self.ended:
            return b""
        self.ended = True
        return scripts.trailer(self.nonce, self.count)


def _df_space(text: str) -> tuple[int | None, int | None]:
    """(bytes in all, bytes free) from `df -Pk` output: a header, then 'filesystem blocks used available ...' in
    KiB; (None, None) when it says something else."""
    numbers = (text.splitlines() or [""])[-1].split()[1:4]
    if len(numbers) != 3 or not all(n.isdigit() for n in numbers):
        return None, None
    return int(numbers[0]) * 1024, int(numbers[2]) * 1024


class Workspace(Snapshots):
    def __init__(self, runtime: Runtime):
        self.runtime = runtime
        self.leases = runtime.leases
        self.snapshot_dir = runtime.state_dir / SNAPSHOT_DIR
        self.snapshot_dir.mkdir(parents=True, exist_ok=True)
        self.spool_dir = runtime.state_dir / "spool"
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self.storage = Storage(runtime)  # the pools' snapshot_storage: snapshots and hibernation copies

    def spool(self) -> tempfile.SpooledTemporaryFile:
        return tempfile.SpooledTemporaryFile(max_size=SPOOL, dir=self.spool_dir)

    def _run(self, name: str, argv: list[str], workdir: str, *, stdin: BinaryIO | None = None,
             stdout: IO[bytes] | CappedBuffer | Bounded | None = None,
             timeout: float = TRANSFER_TIMEOUT) -> tuple[int | None, str]:
        row = self.runtime.sandbox(name)
        marker = f"internal-{uuid.uuid4().hex}"
        try:
            return self.runtime._run_internal(name, argv, workdir, stdin=stdin, stdout=stdout, marker=marker,
                                              timeout=timeout)
        except (SandboxNotRunning, SandboxGone) as error:
            raise self.runtime.died(row, error) from error
        except (PastBound, SinkFailed):
            # Cut off on this side: the script in the sandbox ends too, whether or not it noticed.
            self._kill(name, marker)
            raise

    def _kill(self, name: str, marker: str) -> None:
        """Ends the runtime's own script that carries `marker` (a transfer cut off on this side)."""
        try:
            kill = scripts.sh(scripts.KILL_EXEC, marker, "", *self.runtime.live_markers())
            self.runtime._run_internal(name, kill, "/", timeout=KILL_TIMEOUT)
        except BackendError:
            pass

    def storage_error(self, error: OSError, doing: str) -> Exception:
        """A full state volume as a 507; any other failure on this side as it is."""
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            return no_space(f"{doing}: the runtime's state volume on host {self.runtime.host!r} is full",
                            host=self.runtime.host)
        return error

    def _relay(self, name: str, workdir: str, limit: int, emit: Callable[[Checked], None], doing: str, *,
               skip: tuple[str, ...] | list[str] = (), sparse: bool = False, data_limit: int | None = None) -> None:
        """Runs the tar script in `workdir` and gives `emit` its stream, checked, as it comes (a pipe between
        the exec and the check: nothing is spooled before it is checked). Raises PastBound past `limit` bytes of
        the stream, or past `data_limit` bytes of file data (its `limit` says which). `sparse`: a copy that goes
        back into the sandbox, whose sparse files stay sparse (tarcheck)."""
        deadline = time.monotonic() + TRANSFER_TIMEOUT
        argv = scripts.sh(scripts.TAR_CREATE, "sparse" if sparse else "plain", *skip)
        relayed = relay_tar(lambda writer: self._run(name, argv, workdir, stdout=Bounded(writer, limit),
                                                     timeout=TRANSFER_TIMEOUT),
                            lambda tar: emit(Checked(tar, min(limit, data_limit or limit), deadline, sparse=sparse)),
                            f"sandstack-relay-{name}")
        error, failure = relayed.error, relayed.failure
        if isinstance(failure, PastBound):
            raise PastBound(failure.limit)
        if isinstance(error, PastBound):
            raise PastBound(error.limit)
        if isinstance(failure, Forged):
            raise ApiError(502, f"{doing} {workdir!r}: sandbox {name!r} sent a stream that cannot be a tar of its "
                                f"workspace ({failure}); nothing of it was kept", sandbox=name, path=workdir)
        if isinstance(failure, TooDeep):
            raise conflict(f"{doing} {workdir!r}: sandbox {name!r} holds {failure}; nothing of it was kept",
                           sandbox=name, path=workdir, levels=failure.depth, size=failure.size)
        late = ApiError(504, f"{doing} {workdir!r} in sandbox {name!r} did not finish within {TRANSFER_TIMEOUT} s; it "
                             "was stopped there and nothing was kept", sandbox=name, path=workdir)
        if isinstance(failure, DeadlinePassed):
            raise late  # the check's deadline (the exec's is the same)
        if isinstance(error, SinkFailed):
            if failure is None:
                raise self.storage_error(error.error, doing) from error
            # else this side stopped reading first (the pipe broke): its own failure says why, below
        elif error is not None:
            raise error  # type: ignore[misc]
        else:
            code, stderr = relayed.result
            if code is None:
                raise late
            if code != 0:
                raise self._fail(code, stderr, workdir, name, doing)
        if isinstance(failure, OSError):
            raise self.storage_error(failure, doing) from failure
        if isinstance(failure, tarfile.TarError):
            raise ApiError(502, f"{doing} {workdir!r}: sandbox {name!r} sent a stream that is not a tar ({failure}); "
                                "nothing of it was kept", sandbox=name, path=workdir)
        if failure is not None:
            raise failure

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
        limit = self.download_limit(name)
        out = self.spool()
        try:
            code, stderr = self._run(name, scripts.sh(scripts.READ, rel or "."), root,
                                     stdout=Bounded(out, limit + scripts.READ_HEADER))
        except PastBound as error:
            out.close()
            raise too_big(f"reading {path!r}", limit, path=path) from error
        except SinkFailed as error:
            out.close()
            raise self.storage_error(error.error, f"reading {path!r}") from error
        out.seek(0)
        kind = out.read(1)  # scripts.READ's header: `D`, or `F SIZE` and a newline
        if code == scripts.IS_DIRECTORY and kind == b"D":
            return None, listing(out.read())
        if code != 0:
            raise self._fail(code, stderr, path, name, "reading")
        out.readline()
        return out, None

    @holding  # no pause while it runs
    def write(self, name: str, path: str, body: BinaryIO, nonce: str | None = None) -> None:
        """`body` into the file at `path`; `nonce`: `body` ends with scripts.trailer(nonce, ...) itself when it is
        complete (files_upload.Feed), else it is added here after the last byte."""
        from sandstack.runtime.files_upload import Incomplete

        rel = clean_path(path)
        if not rel:
            raise forbidden(path, "is the workspace root")
        root = self._root(name)
        if nonce is None:
            nonce = uuid.uuid4().hex
            body = _Trailed(body, nonce)
        df = CappedBuffer(4096)
        code, stderr = self._run(name, scripts.sh(scripts.WRITE, rel, nonce), root, stdin=body, stdout=df)
        if code == scripts.NO_SPACE:
            size, free = _df_space(df.data.decode(errors="replace"))
            raise no_space(f"no space: writing {path!r} in sandbox {name!r} filled its filesystem at {root!r} "
                           f"({size} bytes in all, {free} free after the partial file was removed); nothing was "
                           "written", path=path, size=size, free=free)
        if code == scripts.INCOMPLETE:
            raise Incomplete(path)
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

    def download_limit(self, name: str) -> int:
        return self.runtime.pool(self.runtime.sandbox(name).pool).download_limit_bytes

    # Archive: the workspace, as the download of a session's work

    @holding  # no pause while it runs
    def archive(self, name: str, fmt: str) -> IO[bytes]:
        if fmt not in ARCHIVE_FORMATS:
            raise ApiError(422, f"format {fmt!r} is not one of {', '.join(ARCHIVE_FORMATS)}")
        root = self._root(name)
        skipped = _skipped(self.runtime.pool(self.runtime.sandbox(name).pool).writable, root)
        limit = self.download_limit(name)
        out = self.spool()

        def emit(entries: Checked) -> None:
            if fmt == "tar.gz":
                with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as packed:
                    write_tar(entries, packed)
            else:
                write_zip(entries, out)

        try:
            self._relay(name, root, limit, emit, "archiving", skip=skipped)
        except PastBound as error:
            out.close()
            raise too_big(f"the archive of {root!r}", limit, path=root) from error
        except BaseException:
            out.close()
            raise
        out.seek(0)
        return out
