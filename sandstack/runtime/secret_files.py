"""Run-scoped secret files: what a claim passes as `secrets.files`, written to /run/secrets/session/<name> in the
session's sandbox (docs/design/ondemand.md).

That directory is a tmpfs of every sandbox (sandstack.plan.sandbox `session_secrets_tmpfs`): the files are in
memory only, never in a snapshot or a hibernation's copy (neither looks outside the declared writable paths), and
gone with the container's next start, which every release makes (a warm sandbox is stopped and started, an
on-demand one removed). The runtime writes them through the same exec and tar as a restore, as the sandbox's own
user, each mode 0400; what was there before (a claim again with other secrets) is removed first. The values stay
in the runtime's memory (sandstack.runtime.credentials) to be written again after a resume, never on its disk:
not in SQLite, not in the audit log (which names the files), not in any answer or error (an error says which
step failed, never a value).
"""

from __future__ import annotations

import io
import tarfile

from sandstack.runtime import scripts
from sandstack.runtime.errors import ApiError
from sandstack.runtime.execs import Execs

# sandstack.spec.contract's SESSION_SECRETS_DIR, which the runtime's shipped code cannot import (it ships only
# sandstack.runtime and two plan modules: sandstack.plan.runtime_host `code_files`); a test keeps the two equal.
SESSION_SECRETS_DIR = "/run/secrets/session"
MODE = 0o400


def archive(files: dict[str, str]) -> io.BytesIO:
    """The files as a tar stream, each mode 0400 (tar keeps it: the sandbox's umask only takes bits away)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, value in sorted(files.items()):
            data = value.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), MODE, 0
            tar.addfile(info, io.BytesIO(data))
    raw.seek(0)
    return raw


def write(execs: Execs, sandbox: str, files: dict[str, str]) -> None:
    """Replace the sandbox's session secret files with `files` (none: the directory is emptied)."""
    code, stderr = execs.run(sandbox, scripts.sh(scripts.RESTORE), SESSION_SECRETS_DIR, stdin=archive(files))
    if code != 0:
        # stderr is tar's or sh's about names and the directory, never a file's content; cut short anyway.
        raise ApiError(502, f"the session's secret files could not be written to {SESSION_SECRETS_DIR} in sandbox "
                            f"{sandbox!r} (exit {code}): {stderr[-200:]}", sandbox=sandbox)
