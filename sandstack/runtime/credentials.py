"""Run-scoped credentials: secrets a claim passes for that session only: `secrets.env`, added to the
environment of each of its execs, and `secrets.files`, written under /run/secrets/session
(sandstack.runtime.secret_files).

They live in this process's memory and nowhere else: not in SQLite, not in the audit log (which records that
they were given and their names), not in any answer or error, not in the sandbox's configuration (an exec's
environment is its own: a process of the session that still holds them ends with the reset). A reset of the
sandbox drops them, so the next session on it sees nothing; a restart of the runtime drops them too (the
session keeps its sandbox; claim it again with its secrets).
"""

from __future__ import annotations

import threading

from sandstack.runtime.errors import ApiError
from sandstack.runtime.scripts import MARKER_ENV


def check_names(env: dict[str, str]) -> None:
    """The marker of the runtime's own kill (scripts.MARKER_ENV) is not a name a session may set."""
    reserved = [name for name in env if name == MARKER_ENV]
    if reserved:
        raise ApiError(422, f"secret names {reserved!r} are not allowed", names=reserved)


class Credentials:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._env: dict[str, tuple[str, dict[str, str]]] = {}  # sandbox → (session, env)
        self._files: dict[str, tuple[str, dict[str, str]]] = {}  # sandbox → (session, file name → content)

    def give(self, sandbox: str, session: str, env: dict[str, str], files: dict[str, str] | None = None) -> None:
        """The session's secrets, replacing any it was given before (a claim again, after a runtime restart)."""
        with self._lock:
            self._env[sandbox] = (session, dict(env))
            self._files[sandbox] = (session, dict(files or {}))

    def files(self, sandbox: str) -> dict[str, str]:
        """The secret files of the sandbox's session (sandstack.runtime.secret_files), to write again at resume."""
        with self._lock:
            held = self._files.get(sandbox)
        return dict(held[1]) if held else {}

    def env(self, sandbox: str, session: str | None) -> dict[str, str]:
        """The secrets of `session` on `sandbox`: none once the sandbox has been reset or bound to another."""
        with self._lock:
            held = self._env.get(sandbox)
        return dict(held[1]) if held and session is not None and held[0] == session else {}

    def names(self, sandbox: str) -> list[str]:
        with self._lock:
            held = self._env.get(sandbox)
        return sorted(held[1]) if held else []

    def drop(self, sandbox: str) -> None:
        with self._lock:
            self._env.pop(sandbox, None)
            self._files.pop(sandbox, None)
