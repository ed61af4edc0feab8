"""Files and archives of a bound sandbox's workspace, all moved with `exec` as the sandbox's own user
(sandstack.runtime.transfer), so tmpfs paths are seen as the sandbox sees them and nothing is read or written with
more rights than the sandbox has. A read streams (sandstack.runtime.files_stream), an upload too
(sandstack.runtime.files_upload)."""

from __future__ import annotations

import gzip
import uuid
from pathlib import PurePosixPath
from typing import IO, BinaryIO

from sandstack.plan.runtime import WritablePath
from sandstack.runtime import scripts
from sandstack.runtime.backend import CappedBuffer
from sandstack.runtime.errors import ApiError, forbidden, no_space, too_big
from sandstack.runtime.interfaces import Access, Leases, Sandboxes, Transfers
from sandstack.runtime.leases import holding
from sandstack.runtime.tarcheck import (MAX_DEPTH, MAX_NAME, Bounded, Checked, PastBound, SinkFailed, shorten,
                                        write_tar, write_zip)

ARCHIVE_FORMATS = {"tar.gz": "application/gzip", "zip": "application/zip"}


class Incomplete(Exception):
    """WRITE's stream ended without its trailer: the runtime cut it short, and nothing was kept."""


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


class Files:
    def __init__(self, sandboxes: Sandboxes, access: Access, transfers: Transfers, leases: Leases):
        self.sandboxes, self.access, self.transfers, self.leases = sandboxes, access, transfers, leases

    def root(self, name: str) -> str:
        """The workspace root of a usable sandbox (sandstack.runtime.access)."""
        return self.sandboxes.pool(self.access.usable(name).pool).workspace_root

    # Files

    @holding  # no pause while it runs
    def read(self, name: str, path: str) -> tuple[IO[bytes] | None, list[dict[str, object]] | None]:
        """(the file's bytes, None), or (None, the directory's entries)."""
        rel = clean_path(path)
        root = self.root(name)
        limit = self.download_limit(name)
        out = self.transfers.spool()
        try:
            code, stderr = self.transfers.run(name, scripts.sh(scripts.READ, rel or "."), root,
                                              stdout=Bounded(out, limit + scripts.READ_HEADER))
        except PastBound as error:
            out.close()
            raise too_big(f"reading {path!r}", limit, path=path) from error
        except SinkFailed as error:
            out.close()
            raise self.transfers.storage_error(error.error, f"reading {path!r}") from error
        out.seek(0)
        kind = out.read(1)  # scripts.READ's header: `D`, or `F SIZE` and a newline
        if code == scripts.IS_DIRECTORY and kind == b"D":
            return None, listing(out.read())
        if code != 0:
            raise self.transfers.fail(code, stderr, path, name, "reading")
        out.readline()
        return out, None

    @holding  # no pause while it runs
    def write(self, name: str, path: str, body: BinaryIO, nonce: str | None = None) -> None:
        """`body` into the file at `path`; `nonce`: `body` ends with scripts.trailer(nonce, ...) itself when it is
        complete (files_upload.Feed), else it is added here after the last byte."""
        rel = clean_path(path)
        if not rel:
            raise forbidden(path, "is the workspace root")
        root = self.root(name)
        if nonce is None:
            nonce = uuid.uuid4().hex
            body = _Trailed(body, nonce)
        df = CappedBuffer(4096)
        code, stderr = self.transfers.run(name, scripts.sh(scripts.WRITE, rel, nonce), root, stdin=body, stdout=df)
        if code == scripts.NO_SPACE:
            size, free = _df_space(df.data.decode(errors="replace"))
            raise no_space(f"no space: writing {path!r} in sandbox {name!r} filled its filesystem at {root!r} "
                           f"({size} bytes in all, {free} free after the partial file was removed); nothing was "
                           "written", path=path, size=size, free=free)
        if code == scripts.INCOMPLETE:
            raise Incomplete(path)
        if code != 0:
            raise self.transfers.fail(code, stderr, path, name, "writing")

    @holding  # no pause while it runs
    def delete(self, name: str, path: str) -> None:
        rel = clean_path(path)
        if not rel:
            raise forbidden(path, "is the workspace root")
        code, stderr = self.transfers.run(name, scripts.sh(scripts.DELETE, rel), self.root(name))
        if code != 0:
            raise self.transfers.fail(code, stderr, path, name, "deleting")

    def upload_limit(self, name: str) -> int:
        return self.sandboxes.pool(self.sandboxes.get(name).pool).upload_limit_bytes

    def download_limit(self, name: str) -> int:
        return self.sandboxes.pool(self.sandboxes.get(name).pool).download_limit_bytes

    # Archive: the workspace, as the download of a session's work

    @holding  # no pause while it runs
    def archive(self, name: str, fmt: str) -> IO[bytes]:
        if fmt not in ARCHIVE_FORMATS:
            raise ApiError(422, f"format {fmt!r} is not one of {', '.join(ARCHIVE_FORMATS)}")
        root = self.root(name)
        skipped = _skipped(self.sandboxes.pool(self.sandboxes.get(name).pool).writable, root)
        limit = self.download_limit(name)
        out = self.transfers.spool()

        def emit(entries: Checked) -> None:
            if fmt == "tar.gz":
                with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as packed:
                    write_tar(entries, packed)
            else:
                write_zip(entries, out)

        try:
            self.transfers.relay(name, root, limit, emit, "archiving", skip=skipped)
        except PastBound as error:
            out.close()
            raise too_big(f"the archive of {root!r}", limit, path=root) from error
        except BaseException:
            out.close()
            raise
        out.seek(0)
        return out
