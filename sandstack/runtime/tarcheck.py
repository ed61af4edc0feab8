"""What comes out of a sandbox, checked as it streams: a byte bound on every transfer, and the tar streams of
archives and snapshots read entry by entry (Python's tarfile in stream mode) and written out again with only what
a workspace can hold.

Nothing a sandbox sends is trusted: the runtime's `tar` runs as the sandbox's user, which can stop it, write into
its output or put another `tar` first on its PATH. So the stream must be a tar of the workspace: an entry with an
absolute path or a `..` is a forgery and fails the whole transfer (502); a symlink leading out of the tree, a
hardlink to a file not in the stream, a device, fifo or sparse entry is left out (a zip leaves out links too); the
sizes count against the bound. No file is ever held in memory: entries are copied in chunks.

A check for a copy that goes back into the sandbox (a snapshot, a hibernation's copy: `sparse=True`) keeps a sparse
file sparse: a GNU tar sparse member (any of GNU's formats, as the sandbox's `tar --sparse` writes them) passes with its
map checked (regions in order, inside the file's length), its stored data counted against the bound (not its length),
and is written out again in GNU's PAX 1.0 sparse format, which GNU tar extracts with its holes. An archive for the
user leaves sparse members out, as before (its `tar` never writes them). The PAX records `GNU.sparse.*` of any other
member are dropped: only this module writes them.

Every name is bounded (MAX_DEPTH components, MAX_NAME bytes: TooDeep, a 4xx) and checked in time linear in its
length: the checks against the stream's earlier names walk a tree of them (`_Names`), where they built every prefix
of every name, which took minutes for a 3,000-level directory (and held the request's thread all along). A check
given a deadline stops there (DeadlinePassed).
"""

from __future__ import annotations

import itertools
import os
import posixpath
import tarfile
import threading
import time
import zipfile
from dataclasses import dataclass
from typing import IO, Any, Callable, Iterator

CHUNK = 1024 * 1024
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)  # the oldest time a zip entry can hold
# What a name in an archive, a snapshot or a hibernation's copy may be (and a file path of the API,
# sandstack.runtime.files.clean_path): no deeper, no longer. The kernel's PATH_MAX (4096 with its NUL) bounds
# what one call can open; a deeper tree can be made by walking down, but nothing the runtime does needs one.
MAX_DEPTH = 1024
MAX_NAME = 4095


class PastBound(Exception):
    """More bytes came than the transfer may take; the stream is cut there."""

    def __init__(self, limit: int):
        super().__init__(f"more than {limit} bytes")
        self.limit = limit


class SinkFailed(Exception):
    """Writing what came failed on this side (the host's disk is full, the reader went away)."""

    def __init__(self, error: OSError):
        super().__init__(str(error))
        self.error = error


class Forged(Exception):
    """The stream cannot be a tar of the workspace."""


class TooDeep(Exception):
    """A name past MAX_DEPTH components or MAX_NAME bytes: the tree cannot be copied (a 4xx, nothing kept)."""

    def __init__(self, name: str):
        depth, size = name.count("/") + 1, len(name.encode(errors="surrogateescape"))
        super().__init__(f"{shorten(name)!r} ({depth} levels, {size} bytes) is deeper or longer than a copy takes "
                         f"(at most {MAX_DEPTH} levels and {MAX_NAME} bytes)")
        self.name, self.depth, self.size = name, depth, size


class DeadlinePassed(Exception):
    """The check did not finish by its deadline (the request's): it stopped there, nothing kept."""


def shorten(name: str, keep: int = 60) -> str:
    """A long name as its head and tail, for a message."""
    return name if len(name) <= 2 * keep else f"{name[:keep]}...{name[-keep:]}"


def check_name(name: str) -> list[str]:
    """The components of a normalised name within the bounds; raises TooDeep."""
    if len(name) > MAX_NAME or len(name.encode(errors="surrogateescape")) > MAX_NAME:
        raise TooDeep(name)
    parts = name.split("/")
    if len(parts) > MAX_DEPTH:
        raise TooDeep(name)
    return parts


class _Names:
    """The names of a stream so far as a tree of components, so that each check walks one name once: whether a
    name lies under a symlink of the stream, and whether a symlink's name is a directory some entry lies in."""

    def __init__(self) -> None:
        self.root: dict[str, list] = {}  # component → [children, is a symlink]

    def under_link(self, parts: list[str]) -> bool:
        children = self.root
        for part in parts[:-1]:
            node = children.get(part)
            if node is None:
                return False  # no deeper name of the stream: no deeper link
            if node[1]:
                return True
            children = node[0]
        return False

    def is_parent(self, parts: list[str]) -> bool:
        node = self._find(parts)
        return node is not None and bool(node[0])

    def add(self, parts: list[str], link: bool) -> None:
        children = self.root
        for part in parts[:-1]:
            children = children.setdefault(part, [{}, False])[0]
        node = children.setdefault(parts[-1], [{}, False])
        node[1] = node[1] or link

    def _find(self, parts: list[str]) -> list | None:
        children, node = self.root, None
        for part in parts:
            node = children.get(part)
            if node is None:
                return None
            children = node[0]
        return node


class Bounded:
    """A sink taking at most `limit` bytes: the next write past it raises PastBound, which ends the exec's stream
    at once (nothing beyond the bound is read or kept). Its own errors are not OSErrors, so a backend tells them
    from a broken exec stream."""

    def __init__(self, out: IO[bytes], limit: int):
        self.out, self.limit, self.count = out, limit, 0

    def write(self, chunk: bytes) -> int:
        self.count += len(chunk)
        if self.count > self.limit:
            raise PastBound(self.limit)
        try:
            self.out.write(chunk)
        except OSError as error:
            raise SinkFailed(error) from error
        return len(chunk)


def _inside(base: str, target: str) -> str | None:
    """`target` (a link's target, relative to directory `base`) normalised, or None when it may lead out of the
    tree. `..` only at its start: it climbs real directories (no entry lies under a symlink of the stream), where a
    `..` after a name that is itself a symlink would climb from wherever that link points."""
    parts = [part for part in target.split("/") if part not in ("", ".")]
    climbs = len(parts) - len(list(itertools.dropwhile(lambda part: part == "..", parts)))
    if target.startswith("/") or ".." in parts[climbs:]:
        return None
    joined = posixpath.normpath(posixpath.join(base, target))
    return None if joined == ".." or joined.startswith("../") else joined


class Checked:
    """The entries of a tar stream that a workspace can hold, as (member, file or None), normalised names;
    counts what it leaves out. What else than files a kind of tree may hold is `keeps`, the hook a kind of tree overrides (rootsnap.RootChecked)."""

    def __init__(self, tar: tarfile.TarFile, limit: int, deadline: float | None = None, *, sparse: bool = False):
        """`limit`: bytes of file data (a sparse file's stored data only); `deadline`: time.monotonic()'s value past
        which the check stops (DeadlinePassed); `sparse`: sparse files pass, and stay sparse (the module's text)."""
        self.tar, self.limit, self.deadline, self.sparse = tar, limit, deadline, sparse
        self.left_out: list[str] = []
        self.total = 0

    def __iter__(self) -> Iterator[tuple[tarfile.TarInfo, IO[bytes] | None]]:
        files: set[str] = set()
        names = _Names()  # the stream's names so far: its symlinks, and every directory an entry lies in
        for member in self.tar:
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise DeadlinePassed(f"the check did not finish in time (at {member.name[:60]!r})")
            name = member.name
            if len(name) > 2 * MAX_NAME:  # before any work on it: a longer one cannot pass
                raise TooDeep(name)
            if name.startswith("/") or ".." in name.split("/"):
                raise Forged(f"entry {shorten(name)!r} is "
                             f"{'an absolute path' if name.startswith('/') else 'a .. path'}")
            name = posixpath.normpath(name)
            if name == ".":
                continue  # the tree's own top (a writable path, a root's upper directory): its mount's, not the session's
            parts = check_name(name)
            if names.under_link(parts):
                raise Forged(f"entry {shorten(name)!r} lies under a symlink of the same stream")
            if member.issym() and names.is_parent(parts):
                raise Forged(f"entry {shorten(name)!r} turns a directory of the same stream into a symlink")
            names.add(parts, link=False)
            member.name = name
            for key in [key for key in member.pax_headers if key.startswith("GNU.sparse.")]:
                del member.pax_headers[key]
            if member.isreg() and not member.issparse():
                self.total += member.size
                if self.total > self.limit:
                    raise PastBound(self.limit)
                files.add(name)
                yield member, self.tar.extractfile(member)
            elif self.sparse and member.isreg():  # sparse
                stored = self._sparse_map(member)
                self.total += stored
                if self.total > self.limit:
                    raise PastBound(self.limit)
                files.add(name)
                yield member, _Stored(self.tar, member.offset_data, stored)
            elif self.keeps(member, name, files):
                if member.issym():
                    names.add(parts, link=True)
                elif member.islnk():
                    member.linkname = posixpath.normpath(member.linkname)
                yield member, None
            else:
                self.left_out.append(name)

    def _sparse_map(self, member: tarfile.TarInfo) -> int:
        """A sparse member's data regions, checked and left in `member.sparse` ((offset, size) in order, none empty);
        the bytes of data the stream holds for it."""
        regions, end = [], 0
        for offset, size in member.sparse or ():
            if size == 0:
                continue  # GNU's markers: the file's end, the unused slots of its old format's header
            if offset < end or size < 0 or offset + size > member.size:
                raise Forged(f"entry {shorten(member.name)!r} has a sparse map that is out of order or past its "
                             f"length ({offset}+{size} of {member.size})")
            regions.append((offset, size))
            end = offset + size
        stored = sum(size for _, size in regions)
        # Where the stream's next header is (tarfile read this one's): the map must account for the data between.
        if member._block(stored) != self.tar.offset - member.offset_data:
            raise Forged(f"entry {shorten(member.name)!r} has a sparse map of {stored} bytes that does not match its "
                         "data in the stream")
        member.sparse = regions
        return stored

    def keeps(self, member: tarfile.TarInfo, name: str, files: set[str]) -> bool:
        """Whether an entry that is not a regular file is kept: a directory, a symlink that stays inside the tree,
        a hard link to a file of the same stream."""
        if member.isdir():
            return True
        if member.issym():
            return _inside(posixpath.dirname(name), member.linkname) is not None
        return member.islnk() and posixpath.normpath(member.linkname) in files


class _Stored:
    """A sparse member's data as the stream holds it (its regions, one after the other), read from the tar's own
    stream: tarfile's file object for it would read the holes too (gigabytes of zeros for a sparse file)."""

    def __init__(self, tar: tarfile.TarFile, offset: int, size: int):
        self.tar, self.offset, self.left = tar, offset, size

    def read(self, size: int = -1) -> bytes:
        if self.offset is not None:
            self.tar.fileobj.seek(self.offset)  # forward only, as a stream can
            self.offset = None
        size = self.left if size < 0 else min(size, self.left)
        chunk = self.tar.fileobj.read(size) if size else b""
        if len(chunk) < size:
            raise tarfile.ReadError("unexpected end of data in a sparse member")
        self.left -= len(chunk)
        return chunk


class _Prefixed:
    """`head`, then what `data` gives; each read as long as asked (tarfile's copy takes nothing shorter)."""

    def __init__(self, head: bytes, data: IO[bytes] | _Stored):
        self.head, self.data = head, data

    def read(self, size: int = -1) -> bytes:
        chunk, self.head = (self.head, b"") if size < 0 or size >= len(self.head) else \
            (self.head[:size], self.head[size:])
        return chunk + self.data.read(-1 if size < 0 else size - len(chunk)) if size != len(chunk) else chunk


def sparse_entry(member: tarfile.TarInfo, data: IO[bytes] | _Stored) -> tuple[tarfile.TarInfo, _Prefixed]:
    """A checked sparse member as GNU's PAX 1.0 sparse format: the map (its region count, then each offset and size,
    in decimal lines, padded to a block) ahead of the regions' data; the real name and length in `GNU.sparse.*`
    records; a stand-in name (`<dir>/GNUSparseFile.0/<name>`) for tars that know nothing of them. A file that ends
    in a hole ends its map with an empty region at its length (as GNU tar writes it, or its length is lost)."""
    regions = list(member.sparse or ())
    if not regions or regions[-1][0] + regions[-1][1] < member.size:
        regions.append((member.size, 0))
    head = "\n".join([str(len(regions)), *(f"{offset}\n{size}" for offset, size in regions)]) + "\n"
    raw = head.encode("ascii")
    raw += b"\0" * (-len(raw) % tarfile.BLOCKSIZE)
    out = tarfile.TarInfo(posixpath.join(posixpath.dirname(member.name), "GNUSparseFile.0",
                                         posixpath.basename(member.name)))
    out.size = len(raw) + sum(size for _, size in regions)
    out.mode, out.uid, out.gid, out.uname, out.gname = member.mode, member.uid, member.gid, member.uname, member.gname
    out.mtime = member.mtime
    out.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": member.name,
                       "GNU.sparse.realsize": str(member.size)}
    return out, _Prefixed(raw, data)


def write_tar(entries: Checked, out: IO[bytes]) -> None:
    """The checked entries as a plain tar stream on `out` (a sparse file in GNU's PAX 1.0 sparse format)."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for member, data in entries:
            if member.isreg() and member.sparse is not None and data is not None:
                tar.addfile(*sparse_entry(member, data))
            else:
                tar.addfile(member, data)


def write_zip(entries: Checked, out: IO[bytes]) -> None:
    """The checked files and directories as a zip on `out`, each file copied in chunks (links are left out)."""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
        for member, data in entries:
            when = max(time.gmtime(member.mtime)[:6], ZIP_EPOCH)
            if member.isdir():
                info = zipfile.ZipInfo(member.name + "/", when)
                info.external_attr = (0o40000 | (member.mode & 0o7777)) << 16 | 0x10
                zf.writestr(info, b"")
            elif data is not None:
                info = zipfile.ZipInfo(member.name, when)
                info.compress_type, info.file_size = zipfile.ZIP_DEFLATED, member.size
                info.external_attr = (0o100000 | (member.mode & 0o7777)) << 16
                with zf.open(info, "w", force_zip64=member.size >= zipfile.ZIP64_LIMIT) as dest:
                    while chunk := data.read(CHUNK):
                        dest.write(chunk)


@dataclass
class Relayed:
    """How a relay ended: what the producer answered or raised, and what the reading side raised."""

    result: Any = None
    error: BaseException | None = None  # the producer's (PastBound from its Bounded sink, SinkFailed, its own)
    failure: Exception | None = None  # the reading side's (Forged, a TarError, PastBound, the consumer's own)


def relay_tar(produce: Callable[[IO[bytes]], Any], consume: Callable[[tarfile.TarFile], None],
              thread_name: str) -> Relayed:
    """Runs `produce(writer)` (an exec writing a tar stream) in a thread and reads what it writes here, through a
    pipe: `consume` gets it as a tar in stream mode, entry by entry as it comes, so nothing is spooled before it is
    checked. What follows the archive's end is read (within the producer's bound) and dropped. Closing the reading
    end first ends a producer still writing (a broken pipe). The callers say what each outcome means."""
    read_fd, write_fd = os.pipe()
    reader, writer = os.fdopen(read_fd, "rb"), os.fdopen(write_fd, "wb", buffering=0)
    out = Relayed()

    def run() -> None:
        try:
            out.result = produce(writer)
        except BaseException as error:  # handed to the reading thread
            out.error = error
        finally:
            writer.close()

    thread = threading.Thread(target=run, name=thread_name, daemon=True)
    thread.start()
    try:
        with tarfile.open(fileobj=reader, mode="r|") as tar:
            consume(tar)
        while reader.read(CHUNK):
            pass
    except Exception as error:
        out.failure = error
    finally:
        reader.close()
        thread.join()
    return out
