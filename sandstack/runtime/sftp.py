"""SFTP into a session's sandbox (docs/design/ssh.md): asyncssh's SFTP server with every file operation done by the
runtime's own file operations (sandstack.runtime.files: the READ, WRITE and DELETE scripts, as the sandbox's user,
through Docker exec) or, for what they do not offer (mkdir, rmdir, rename, chmod, symlinks), one command of the
sandbox's user. No `sftp-server` is needed in the image, and none runs there.

It sees the workspace, as the file API does: `/` of the client is the sandbox's workspace root's path, relative paths
start there, and a path outside it is refused (permission denied, saying so); the shell reaches the rest. A file is
read as a stream from its start (a read further on skips ahead; one further back reads it again), and written whole:
an open for writing replaces the file with what was written when it is closed (WRITE's hidden file beside it; scp's
in-place write, which truncates at its end, is one), writes come in order (some may be early: they wait, up to a
bound), and appending or reading and writing one handle is refused. Times and owners are not set; a mode is (`chmod`,
`put -p`).
"""

from __future__ import annotations

import asyncio
import errno
import os
import posixpath
import stat
import uuid
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

import asyncssh
from asyncssh import SFTPAttrs, SFTPName

from sandstack.runtime.backend import BackendError
from sandstack.runtime.errors import ApiError
from sandstack.runtime.files import Incomplete
from sandstack.runtime.files_stream import open_read
from sandstack.runtime.files_upload import Feed
from sandstack.runtime.processes import Command
from sandstack.runtime.session_keys import shown

if TYPE_CHECKING:
    from sandstack.runtime.service import Runtime
    from sandstack.runtime.store import SandboxRow

MAX_EARLY = 8 * 1024 * 1024  # bytes of writes that came before their turn, held until it comes
COMMAND_TIMEOUT = 60  # seconds a mkdir, rename, chmod... may take
TYPES = {"file": stat.S_IFREG, "dir": stat.S_IFDIR, "link": stat.S_IFLNK}
FXF_READ, FXF_WRITE, FXF_APPEND = 0x01, 0x02, 0x04  # the SFTP v3 open flags


def _error(error: BaseException) -> asyncssh.SFTPError:
    """The runtime's refusal as the SFTP status a client shows."""
    if isinstance(error, asyncssh.SFTPError):
        return error
    if isinstance(error, ApiError):
        if error.status == 404:
            return asyncssh.SFTPNoSuchFile(error.message)
        if error.status == 403:
            return asyncssh.SFTPPermissionDenied(error.message)
        return asyncssh.SFTPFailure(error.message)
    return asyncssh.SFTPFailure(f"the sandbox did not answer: {error}")


class Endpoint(Protocol):
    """What SFTP uses of the SSH endpoint (sandstack.runtime.ssh.SshEndpoint): the runtime, the connection's login
    and its check, the audit, and the executor."""

    runtime: Runtime

    def login_of(self, conn: object) -> Any: ...

    def still(self, login: Any) -> SandboxRow: ...

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    def record(self, who: str, operation: str, outcome: str, status: int, *, session: str | None,
               sandbox: str | None, scope: str | None) -> None: ...


class _Reader:
    def __init__(self, chunks: Iterator[bytes] | None, size: int | None, path: str):
        self.chunks, self.size, self.path = chunks, size, path
        self.pos, self.buffer = 0, b""

    def seek(self, offset: int, whence: int) -> int:
        """For asyncssh's sparse-range extension (its own client asks): the whole file is data, no hole."""
        size = self.size or 0
        if whence == getattr(os, "SEEK_DATA", 3):
            if offset >= size:
                raise OSError(errno.ENXIO, "no data past the end")
            return offset
        return size  # SEEK_HOLE: the end


class _Writer:
    def __init__(self, path: str, feed: Feed, task: asyncio.Future, limit: int):
        self.path, self.feed, self.task, self.limit = path, feed, task, limit
        self.pos, self.early, self.held, self.mode = 0, {}, 0, None
        self.failed = False  # cut short: its close writes nothing

    def cut(self) -> None:
        self.failed = True
        self.feed.cut()


class SandboxSFTP(asyncssh.SFTPServer):
    def __init__(self, endpoint: Endpoint, chan: asyncssh.SSHServerChannel[bytes]):
        super().__init__(chan)
        self.endpoint = endpoint
        self.login = endpoint.login_of(chan.get_connection())
        self.runtime, self.sandbox = endpoint.runtime, self.login.sandbox
        self.peer = str((chan.get_extra_info("peername") or ("-",))[0])
        row = self.runtime.store.by_session(self.login.session)
        self.root = self.runtime.sandboxes.pool(row.pool).workspace_root if row else "/"
        endpoint.record(self.peer, "sftp", "opened", 101, session=_shown(self.login), sandbox=self.sandbox,
                        scope=self.login.scope)

    async def _call(self, fn: Any, *args: Any) -> Any:
        """A runtime call once the login still stands, its refusal as an SFTP status."""
        try:
            await self.endpoint.call(self.endpoint.still, self.login)
            return await self.endpoint.call(fn, *args)
        except asyncssh.SFTPError:
            raise
        except (ApiError, BackendError, Incomplete) as error:
            raise _error(error) from None
        except Exception as error:  # noqa: BLE001 - a Refused login, or what the sandbox did
            raise asyncssh.SFTPPermissionDenied(str(error)) from None

    # Paths: the client's `/...` is the sandbox's path; only the workspace is reached

    def _full(self, path: bytes) -> str:
        text = path.decode("utf-8", "surrogateescape")
        return posixpath.normpath(posixpath.join(self.root, text)) if text else self.root

    def _rel(self, path: bytes) -> str:
        full = self._full(path)
        if full == self.root or self.root == "/":
            return full.lstrip("/") if self.root == "/" else ""
        if not full.startswith(self.root + "/"):
            raise asyncssh.SFTPPermissionDenied(f"{full} is outside the workspace {self.root} (SFTP reaches the "
                                                "workspace; the shell reaches the rest)")
        return full[len(self.root) + 1:]

    def realpath(self, path: bytes) -> bytes:
        return self._full(path).encode("utf-8", "surrogateescape")

    # Reading what is there

    def _entries(self, rel: str) -> list[dict[str, object]]:
        stream, entries = self.runtime.files.read(self.sandbox, rel)
        if stream is not None:
            stream.close()
            raise asyncssh.SFTPNoSuchFile(f"{rel or '.'} is not a directory")
        return entries or []

    async def listdir(self, path: bytes) -> list[SFTPName]:
        rel = self._rel(path)
        entries = await self._call(self._entries, rel)
        names = [SFTPName(b".", attrs=_dir()), SFTPName(b"..", attrs=_dir())]
        return names + [SFTPName(str(e["name"]).encode("utf-8", "surrogateescape"), attrs=_attrs(e)) for e in entries]

    async def lstat(self, path: bytes) -> SFTPAttrs:
        rel = self._rel(path)
        if not rel:
            return _dir()
        parent, name = posixpath.split(rel)
        entries = await self._call(self._entries, parent)
        found = next((e for e in entries if e["name"] == name), None)
        if found is None:
            raise asyncssh.SFTPNoSuchFile(f"{self._full(path)} does not exist")
        return _attrs(found)

    async def stat(self, path: bytes) -> SFTPAttrs:
        attrs = await self.lstat(path)
        if attrs.type != asyncssh.FILEXFER_TYPE_SYMLINK and stat.S_IFMT(attrs.permissions or 0) != stat.S_IFLNK:
            return attrs
        opened = await self._call(open_read, self.runtime.files, self.sandbox, self._rel(path))  # where it leads
        if opened.entries is not None:
            return _dir()
        opened.chunks.close()
        return SFTPAttrs(type=asyncssh.FILEXFER_TYPE_REGULAR, size=opened.size, permissions=stat.S_IFREG | 0o644)

    # Files

    async def open(self, path: bytes, pflags: int, attrs: SFTPAttrs) -> object:
        rel = self._rel(path)
        if pflags & FXF_WRITE:
            # Without FXF_TRUNC too: OpenSSH's scp writes in place and truncates at the end (fsetstat of its size).
            if pflags & (FXF_READ | FXF_APPEND):
                raise asyncssh.SFTPOpUnsupported("a file is written whole here: open it to write (put, scp), not "
                                                 "to read and write or to append")
            await self.endpoint.call(self.endpoint.still, self.login)
            return self._writer(rel)
        opened = await self._call(open_read, self.runtime.files, self.sandbox, rel)
        if opened.entries is not None:
            raise asyncssh.SFTPFailure(f"{self._full(path)} is a directory")
        return _Reader(opened.chunks, opened.size, rel)

    def _writer(self, rel: str) -> _Writer:
        feed, files = Feed(uuid.uuid4().hex), self.runtime.files

        def write() -> None:
            try:
                files.write(self.sandbox, rel, feed, nonce=feed.nonce)
            finally:
                feed.gone()  # the script ended (or never started): the writes stop waiting on it

        task = asyncio.ensure_future(self.endpoint.call(write))
        task.add_done_callback(lambda done: done.cancelled() or done.exception())
        return _Writer(rel, feed, task, files.upload_limit(self.sandbox))

    async def read(self, file_obj: object, offset: int, size: int) -> bytes:
        reader = file_obj
        if not isinstance(reader, _Reader):
            raise asyncssh.SFTPFailure("the file is open for writing")
        if offset < reader.pos:  # back: from the start again
            reader.chunks.close()
            opened = await self._call(open_read, self.runtime.files, self.sandbox, reader.path)
            reader.chunks, reader.pos, reader.buffer = opened.chunks, 0, b""
        while reader.pos + len(reader.buffer) < offset + size:
            chunk = await self._call(next, reader.chunks, b"")
            if not chunk:
                break
            reader.buffer += chunk
        start = offset - reader.pos
        data = reader.buffer[start:start + size] if start >= 0 else b""
        drop = max(min(start + len(data), len(reader.buffer)), 0)  # what was read is not read again
        reader.buffer, reader.pos = reader.buffer[drop:], reader.pos + drop
        return data

    async def write(self, file_obj: object, offset: int, data: bytes) -> int:
        writer = file_obj
        if not isinstance(writer, _Writer):
            raise asyncssh.SFTPFailure("the file is open for reading")
        if offset != writer.pos:  # early: it waits for its turn (a client sends several writes at once)
            if offset < writer.pos or writer.held + len(data) > MAX_EARLY:
                writer.cut()
                raise asyncssh.SFTPOpUnsupported("writes must come in order: this file is written whole, as a "
                                                 "stream")
            writer.early[offset] = data
            writer.held += len(data)
            return len(data)
        await self._put(writer, data)
        while writer.pos in writer.early:
            data = writer.early.pop(writer.pos)
            writer.held -= len(data)
            await self._put(writer, data)
        return len(data)

    async def _put(self, writer: _Writer, data: bytes) -> None:
        if writer.task.done():
            await self._finish(writer)  # the script ended early: its status says why
            raise asyncssh.SFTPFailure(f"writing {writer.path} ended early")
        if writer.pos + len(data) > writer.limit:
            writer.cut()
            raise asyncssh.SFTPFailure(f"writing {writer.path}: past the pool's upload limit of {writer.limit} "
                                       "bytes (session.upload_limit); nothing was written")
        writer.pos += len(data)
        if data and not writer.feed.offer(data):
            await self.endpoint.call(writer.feed.put, data)

    async def close(self, file_obj: object) -> None:
        if isinstance(file_obj, _Reader):
            if file_obj.chunks is not None:
                file_obj.chunks.close()
            return
        writer = file_obj
        assert isinstance(writer, _Writer)
        if writer.failed:
            try:
                await writer.task
            except (ApiError, BackendError, Incomplete):
                pass  # the failure was the write's answer; the path keeps what it held
            return
        if writer.early:
            writer.cut()
            raise asyncssh.SFTPFailure(f"writing {writer.path}: bytes before offset {min(writer.early)} never came; "
                                       "nothing was written")
        writer.feed.finish()
        await self._finish(writer)
        if writer.mode is not None:
            await self._run(["chmod", f"{writer.mode & 0o7777:o}", "--", writer.path])

    async def _finish(self, writer: _Writer) -> None:
        try:
            await writer.task
        except (ApiError, BackendError, Incomplete) as error:
            raise _error(error) from None

    async def fstat(self, file_obj: object) -> SFTPAttrs:
        if isinstance(file_obj, _Reader):
            return SFTPAttrs(type=asyncssh.FILEXFER_TYPE_REGULAR, size=file_obj.size, permissions=stat.S_IFREG | 0o644)
        assert isinstance(file_obj, _Writer)
        return SFTPAttrs(type=asyncssh.FILEXFER_TYPE_REGULAR, size=file_obj.pos, permissions=stat.S_IFREG | 0o644)

    async def fsetstat(self, file_obj: object, attrs: SFTPAttrs) -> None:
        if isinstance(file_obj, _Writer):
            if attrs.size is not None and attrs.size != file_obj.pos:  # scp's truncation at its end is no change
                raise asyncssh.SFTPOpUnsupported(f"{file_obj.path} is written whole: it is {file_obj.pos} bytes when "
                                                 f"closed, not {attrs.size}")
            if attrs.permissions is not None:
                file_obj.mode = attrs.permissions  # once the file is there, at its close
            return
        assert isinstance(file_obj, _Reader)
        await self.setstat(file_obj.path.encode("utf-8", "surrogateescape"), attrs)

    async def setstat(self, path: bytes, attrs: SFTPAttrs) -> None:
        if attrs.size is not None:
            await self._run(["truncate", "-s", str(attrs.size), "--", self._rel(path)])
        if attrs.permissions is not None:  # times and owners are not set (module docstring)
            await self._run(["chmod", f"{attrs.permissions & 0o7777:o}", "--", self._rel(path)])

    # Names

    async def remove(self, path: bytes) -> None:
        rel = self._rel(path)
        attrs = await self.lstat(path)
        if attrs.type == asyncssh.FILEXFER_TYPE_DIRECTORY or stat.S_ISDIR(attrs.permissions or 0):
            raise asyncssh.SFTPFailure(f"{self._full(path)} is a directory: remove it with rmdir")
        await self._call(self.runtime.files.delete, self.sandbox, rel)

    async def mkdir(self, path: bytes, attrs: SFTPAttrs) -> None:
        mode = ["-m", f"{attrs.permissions & 0o7777:o}"] if attrs.permissions is not None else []
        await self._run(["mkdir", *mode, "--", self._rel(path)])

    async def rmdir(self, path: bytes) -> None:
        await self._run(["rmdir", "--", self._rel(path)])

    async def rename(self, oldpath: bytes, newpath: bytes) -> None:
        # SFTP's rename does not replace (draft-ietf-secsh-filexfer-02, 6.5); posix-rename does.
        await self._run(["sh", "-c", '[ ! -e "$2" ] && [ ! -L "$2" ] || { echo "$2: exists" >&2; exit 1; }; '
                         'exec mv -- "$1" "$2"', "rename", self._rel(oldpath), self._rel(newpath)])

    async def posix_rename(self, oldpath: bytes, newpath: bytes) -> None:
        await self._run(["mv", "-f", "--", self._rel(oldpath), self._rel(newpath)])

    async def readlink(self, path: bytes) -> bytes:
        return (await self._run(["readlink", "--", self._rel(path)])).rstrip("\n").encode("utf-8", "surrogateescape")

    async def symlink(self, oldpath: bytes, newpath: bytes) -> None:
        # OpenSSH's sftp sends (link, target) in this order (its documented swap); asyncssh's server takes it so.
        await self._run(["ln", "-s", "--", oldpath.decode("utf-8", "surrogateescape"), self._rel(newpath)])

    async def _run(self, argv: list[str]) -> str:
        """One command of the sandbox's user in the workspace root; its stdout, or its stderr as the failure."""
        cmd = Command(argv, self.root, {})
        result = await self._call(self.runtime.processes.run, self.sandbox, cmd, COMMAND_TIMEOUT)
        if result["exit_code"] != 0:
            message = str(result["stderr"]).strip() or f"{argv[0]} exited {result['exit_code']}"
            if "No such file" in message:
                raise asyncssh.SFTPNoSuchFile(message)
            if "Permission denied" in message:
                raise asyncssh.SFTPPermissionDenied(message)
            raise asyncssh.SFTPFailure(message)
        return str(result["stdout"])

    def exit(self) -> None:
        # An exit status before the channel closes (asyncssh closes it with none): OpenSSH's ssh then exits 0, not
        # 255, and scp, which checks it, does not call a finished transfer failed.
        try:
            self.channel.exit(0)
        except OSError:
            pass  # the client is gone already
        self.endpoint.record(self.peer, "sftp", "closed", 200, session=_shown(self.login), sandbox=self.sandbox,
                             scope=self.login.scope)


def _attrs(entry: dict[str, object]) -> SFTPAttrs:
    kind = TYPES.get(str(entry["type"]), 0)
    mode = int(str(entry["mode"]), 8) if entry.get("mode") else (0o755 if kind == stat.S_IFDIR else 0o644)
    sftp_type = {stat.S_IFREG: asyncssh.FILEXFER_TYPE_REGULAR, stat.S_IFDIR: asyncssh.FILEXFER_TYPE_DIRECTORY,
                 stat.S_IFLNK: asyncssh.FILEXFER_TYPE_SYMLINK}.get(kind, asyncssh.FILEXFER_TYPE_SPECIAL)
    return SFTPAttrs(type=sftp_type, size=int(str(entry.get("size") or 0)), permissions=kind | mode)


def _dir() -> SFTPAttrs:
    return SFTPAttrs(type=asyncssh.FILEXFER_TYPE_DIRECTORY, size=0, permissions=stat.S_IFDIR | 0o755)


def _shown(login: Any) -> str | None:
    return shown(login.session)
