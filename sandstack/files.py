"""The one way a command reads a file a user names: spec, policy and review files (through the spec loader), stack
outputs, a stack's config, an exec's script, a file to upload, a git input's blob.

Hostile or mistaken paths are the normal case, so before anything is read the path must be a regular file: a named
pipe would make the read wait for a writer forever, `/dev/zero` never ends (`status --outputs /dev/zero` grew to
9.9 GiB), a directory or a socket is no file. The kind is checked by path first (opening a FIFO waits), then again
on the open descriptor, which is opened non-blocking so that a file swapped for a pipe in between cannot hang the
read. What is read whole is read to a bound and refused past it; what is streamed (an upload) is bounded by its
receiver. Failures are `UnreadableFile`, an OSError whose message says what the path is and what was expected.

Standard library only: the runtime's client and the CLI's start-up import it, not the spec layer.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any, BinaryIO

KIB = 1024
MIB = KIB * KIB

_KINDS_OF_FILE = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                  (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


class UnreadableFile(OSError):
    """A named file that cannot be read as one: `filename` and `strerror` as an OSError has them (so every handler
    of OSError prints `path: reason`), and `rule`: 'io' (missing, not a regular file, refused) or 'size'."""

    def __init__(self, filename: str, message: str, rule: str = "io"):
        super().__init__(message)
        self.filename, self.strerror, self.rule = filename, message, rule

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def not_a_file(mode: int) -> str | None:
    """What a path is when it is not a regular file ('a named pipe (FIFO)', ...), else None."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS_OF_FILE if test(mode)), "a special file")


def size_text(limit: int) -> str:
    """A bound as a message says it: whole MiB past one MiB, else KiB (the spec loader's '1024 KiB')."""
    return f"{limit // MIB} MiB" if limit > MIB and limit % MIB == 0 else f"{limit // KIB} KiB"


def _open_nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NONBLOCK)


def _refused(name: str, kind: str, what: str) -> UnreadableFile:
    if kind == "a directory":
        return UnreadableFile(name, f"is a directory, not {what}")
    return UnreadableFile(name, f"is {kind}, not a regular file: give the path of {what}")


def _failed(name: str, error: OSError) -> UnreadableFile:
    if isinstance(error, UnreadableFile):
        return error
    if isinstance(error, FileNotFoundError):
        return UnreadableFile(name, "no such file")
    if isinstance(error, PermissionError):
        return UnreadableFile(name, "permission denied")
    return UnreadableFile(name, f"cannot be read: {error.strerror or error}")


def check_regular(path: str | os.PathLike[str], display: str | None = None, what: str = "a file") -> None:
    """UnreadableFile unless `path` is a regular file (by what a symlink points to). For a path handed on to a
    reader that opens it later (`open_regular`, which checks again)."""
    name = display or os.fspath(path)
    try:
        kind = not_a_file(os.stat(path).st_mode)
    except OSError as error:
        raise _failed(name, error) from None
    if kind:
        raise _refused(name, kind, what)


def open_regular(path: str | os.PathLike[str], display: str | None = None, what: str = "a file") -> BinaryIO:
    """The file opened for reading in binary, or UnreadableFile when it is not a regular file or cannot be opened."""
    name = display or os.fspath(path)
    check_regular(path, name, what)
    try:
        handle = open(path, "rb", opener=_open_nonblocking)  # noqa: SIM115 (returned open)
    except OSError as error:
        raise _failed(name, error) from None
    kind = not_a_file(os.fstat(handle.fileno()).st_mode)
    if kind:
        handle.close()
        raise _refused(name, kind, what)
    return handle


def read_bytes(path: str | os.PathLike[str], limit: int, display: str | None = None, what: str = "a file") -> bytes:
    """The whole file, at most `limit` bytes (only `limit` + 1 are ever read), else UnreadableFile (rule 'size' past
    the bound)."""
    name = display or os.fspath(path)
    with open_regular(path, name, what) as handle:
        try:
            raw = handle.read(limit + 1)
        except OSError as error:
            raise _failed(name, error) from None
    if len(raw) > limit:
        raise UnreadableFile(name, f"is larger than the {size_text(limit)} limit for {what}", "size")
    return raw


def read_json(path: str | os.PathLike[str], limit: int, what: str, display: str | None = None) -> Any:
    """A JSON file's value, read as `read_bytes` reads (UnreadableFile), or a ValueError located in the file
    (`FILE:LINE:COLUMN: $: not JSON: …`) when it is not JSON."""
    name = display or os.fspath(path)
    raw = read_bytes(path, limit, name, what)
    try:
        return json.loads(raw)
    except json.JSONDecodeError as error:
        raise ValueError(f"{name}:{error.lineno}:{error.colno}: $: is not JSON: {error.msg}") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{name}: $: is not UTF-8 text: byte {error.start} cannot be decoded") from None
    except RecursionError:
        raise ValueError(f"{name}: $: nests too deeply to be read") from None


def read_text(path: str | os.PathLike[str], limit: int, what: str, display: str | None = None) -> str:
    """A UTF-8 text file, read as `read_bytes` reads (UnreadableFile), or a ValueError naming the first byte that is
    not UTF-8."""
    name = display or os.fspath(path)
    try:
        return read_bytes(path, limit, name, what).decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{name}: is not UTF-8 text: byte {error.start} cannot be decoded") from None
