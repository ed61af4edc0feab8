"""How bytes move between the runtime and a sandbox: the file scripts run by exec as the sandbox's own user
(sandstack.runtime.scripts), a tar stream checked as it is relayed (sandstack.runtime.tarcheck), the spool a transfer
may spill into on the state volume, and what a script's exit status means as an answer. Files, archives, snapshots
and hibernation copies all move through it."""

from __future__ import annotations

import errno
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from typing import IO, BinaryIO, Callable

from sandstack.runtime import scripts
from sandstack.runtime.backend import CappedBuffer, SandboxGone, SandboxNotRunning
from sandstack.runtime.errors import ApiError, conflict, forbidden, no_space
from sandstack.runtime.interfaces import Execs, Sandboxes
from sandstack.runtime.tarcheck import (Bounded, Checked, DeadlinePassed, Forged, PastBound, SinkFailed, TooDeep,
                                        relay_tar)

SPOOL = 8 * 1024 * 1024  # bytes kept in memory before a transfer spills to a file under the state dir
# Seconds an archive, a snapshot or a hibernation's copy may take: the deadline of the exec that reads the tree and
# of the check of what it sends (the request's thread waits on both).
TRANSFER_TIMEOUT = 300


class Transfers:
    def __init__(self, sandboxes: Sandboxes, execs: Execs, state_dir: Path):
        self.sandboxes, self.execs = sandboxes, execs
        self.spool_dir = state_dir / "spool"
        self.spool_dir.mkdir(parents=True, exist_ok=True)

    def spool(self) -> tempfile.SpooledTemporaryFile:
        return tempfile.SpooledTemporaryFile(max_size=SPOOL, dir=self.spool_dir)

    def run(self, name: str, argv: list[str], workdir: str, *, stdin: BinaryIO | None = None,
            stdout: IO[bytes] | CappedBuffer | Bounded | None = None,
            timeout: float = TRANSFER_TIMEOUT) -> tuple[int | None, str]:
        """A file script in sandbox `name`; a sandbox that stopped under it is reported as one that died while
        bound; one cut off on this side (past its bound, its sink failed) is killed there too."""
        row = self.sandboxes.get(name)
        marker = f"internal-{uuid.uuid4().hex}"
        try:
            return self.execs.run(name, argv, workdir, stdin=stdin, stdout=stdout, marker=marker, timeout=timeout)
        except (SandboxNotRunning, SandboxGone) as error:
            raise self.sandboxes.died(row, error) from error
        except (PastBound, SinkFailed):
            # Cut off on this side: the script in the sandbox ends too, whether or not it noticed.
            self.kill(name, marker)
            raise

    def kill(self, name: str, marker: str) -> None:
        """Ends the runtime's own script that carries `marker` (a transfer cut off on this side)."""
        self.execs.kill_quietly(name, marker)

    def storage_error(self, error: OSError, doing: str) -> Exception:
        """A full state volume as a 507; any other failure on this side as it is."""
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            host = self.sandboxes.host
            return no_space(f"{doing}: the runtime's state volume on host {host!r} is full", host=host)
        return error

    def relay(self, name: str, workdir: str, limit: int, emit: Callable[[Checked], None], doing: str, *,
              skip: tuple[str, ...] | list[str] = (), sparse: bool = False, data_limit: int | None = None) -> None:
        """Runs the tar script in `workdir` and gives `emit` its stream, checked, as it comes (a pipe between
        the exec and the check: nothing is spooled before it is checked). Raises PastBound past `limit` bytes of
        the stream, or past `data_limit` bytes of file data (its `limit` says which). `sparse`: a copy that goes
        back into the sandbox, whose sparse files stay sparse (tarcheck)."""
        deadline = time.monotonic() + TRANSFER_TIMEOUT
        argv = scripts.sh(scripts.TAR_CREATE, "sparse" if sparse else "plain", *skip)
        relayed = relay_tar(lambda writer: self.run(name, argv, workdir, stdout=Bounded(writer, limit),
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
                raise self.fail(code, stderr, workdir, name, doing)
        if isinstance(failure, OSError):
            raise self.storage_error(failure, doing) from failure
        if isinstance(failure, tarfile.TarError):
            raise ApiError(502, f"{doing} {workdir!r}: sandbox {name!r} sent a stream that is not a tar ({failure}); "
                                "nothing of it was kept", sandbox=name, path=workdir)
        if failure is not None:
            raise failure

    def fail(self, code: int | None, stderr: str, path: str, name: str, doing: str) -> ApiError:
        """What a file script's exit status means, as the answer."""
        root = self.sandboxes.pool(self.sandboxes.get(name).pool).workspace_root
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
