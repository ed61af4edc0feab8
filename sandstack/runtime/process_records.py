"""A row per process on the runtime's state volume (`processes.sqlite3`): which ran, and how each ended, so that a
restarted runtime knows which ones it left running (sandstack.runtime.processes ends them) and still answers for
the ended ones of a session."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from sandstack.runtime.session_keys import shown

SCHEMA = """
CREATE TABLE IF NOT EXISTS processes (
    id TEXT PRIMARY KEY, sandbox TEXT NOT NULL, session TEXT NOT NULL, marker TEXT NOT NULL,
    started_at REAL NOT NULL, status TEXT NOT NULL, exit_code INTEGER, ended_at REAL, message TEXT
);
"""


class ProcessRecords:
    def __init__(self, path: Path):
        # One connection, used by one thread at a time (request threads and the processes' followers share it).
        self._connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            self._connection.executescript(SCHEMA)

    def _execute(self, query: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._connection.execute(query, args).fetchall()

    def started(self, process: str, sandbox: str, session: str, marker: str, started_at: float) -> None:
        self._execute("INSERT INTO processes VALUES (?, ?, ?, ?, ?, 'running', NULL, NULL, NULL)",
                      (process, sandbox, session, marker, started_at))

    def ended(self, process: str, status: str, exit_code: int | None, ended_at: float | None,
              message: str | None) -> None:
        """How it ended; only a row still running: a final status (a restarted runtime's 'ended') is never
        written over."""
        self._execute("UPDATE processes SET status = ?, exit_code = ?, ended_at = ?, message = ? "
                      "WHERE id = ? AND status = 'running'", (status, exit_code, ended_at, message, process))

    def note(self, process: str, message: str) -> None:
        self._execute("UPDATE processes SET message = ? WHERE id = ?", (message, process))

    def forget(self, process: str) -> None:
        self._execute("DELETE FROM processes WHERE id = ?", (process,))

    def forget_sandbox(self, sandbox: str) -> None:
        self._execute("DELETE FROM processes WHERE sandbox = ?", (sandbox,))

    def running(self) -> list[tuple[str, str, str, str]]:
        """(id, sandbox, session, marker) of each process recorded as running."""
        return [tuple(row) for row in self._execute(  # type: ignore[misc]
            "SELECT id, sandbox, session, marker FROM processes WHERE status = 'running'")]

    def rows(self, sandbox: str, session: str, process: str | None = None) -> list[dict[str, object]]:
        """The session's recorded processes on the sandbox (one, with `process`), as the API gives a process."""
        where, args = "sandbox = ? AND session = ?", (sandbox, session)
        if process is not None:
            where, args = f"id = ? AND {where}", (process, *args)
        found = self._execute(f"SELECT id, sandbox, session, started_at, status, exit_code, ended_at, message "
                              f"FROM processes WHERE {where} ORDER BY started_at", args)
        return [{"id": r[0], "sandbox": r[1], "session": shown(r[2]), "command": None, "status": r[4], "exit_code": r[5],
                 "started_at": r[3], "ended_at": r[6], "duration_ms": None, "stdin": False, "stdin_pending": 0,
                 "tty": False, "timeout": None, "output_end": 0, "stdout_bytes": 0, "stderr_bytes": 0,
                 "stdout_dropped": 0, "stderr_dropped": 0, "message": r[7]} for r in found]
