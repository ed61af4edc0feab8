"""The runtime's state in SQLite: each declared sandbox's status and session, and the snapshots.

One connection, one lock, and `BEGIN IMMEDIATE` for every change. A claim binds with a compare-and-set
(`update_if`: the row still idle), so 20 claims on a pool of 4 bind exactly 4 sandboxes, and no Docker call is
made while the lock is held (sandstack.runtime.claims). The file lives on the host's state volume, so sessions and
snapshots outlive a restart of the runtime.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Literal

Status = Literal["idle", "bound", "paused", "resetting", "unhealthy", "quarantined", "expired", "absent", "creating",
                 "hibernated"]

# Seconds: how often API activity is written to a sandbox's row at most (the idle clock's resolution). Every write
# is a transaction committed to disk: two per exec were most of the runtime's own time for a short command.
TOUCH_EVERY = 1.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS sandboxes (
    name TEXT PRIMARY KEY,
    pool TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'idle',
    session TEXT UNIQUE,
    bound_at REAL,
    from_snapshot TEXT,
    paused_by TEXT,
    last_activity REAL,
    cpu_ns INTEGER,
    detail TEXT,
    size TEXT,
    restore TEXT,
    applied TEXT
);
CREATE TABLE IF NOT EXISTS session_tokens (
    digest TEXT PRIMARY KEY,
    session TEXT NOT NULL,
    sandbox TEXT NOT NULL,
    pool TEXT NOT NULL,
    bound_at REAL,
    expires_at REAL NOT NULL
);
-- The container a session's binding was seen on (Docker's id and create time), so that a container recreated while
-- the session was bound (an apply that renewed it, while the runtime ran or was down) ends the session with a cause
-- instead of leaving it bound to a new, empty container. A row stands for the binding (session, bound_at) it names.
CREATE TABLE IF NOT EXISTS bindings (
    sandbox TEXT PRIMARY KEY,
    session TEXT NOT NULL,
    bound_at REAL,
    container TEXT NOT NULL,
    created TEXT
);
-- Sessions the runtime ended on its own (not released), with why: a lookup of one answers the cause.
CREATE TABLE IF NOT EXISTS ended (
    session TEXT PRIMARY KEY,
    sandbox TEXT NOT NULL,
    at REAL NOT NULL,
    cause TEXT NOT NULL
);
-- The public keys a claim registered for its session's SSH logins (sandstack.runtime.ssh_keys), with the binding
-- (sandbox, bound_at) they were given for: they open that binding alone.
CREATE TABLE IF NOT EXISTS ssh_keys (
    session TEXT NOT NULL,
    key TEXT NOT NULL,
    sandbox TEXT NOT NULL,
    bound_at REAL,
    PRIMARY KEY (session, key)
);
CREATE TABLE IF NOT EXISTS snapshots (
    id TEXT PRIMARY KEY,
    pool TEXT NOT NULL,
    sandbox TEXT NOT NULL,
    session TEXT,
    created_at REAL NOT NULL,
    size INTEGER NOT NULL,
    paths TEXT NOT NULL
);
"""


@dataclass(frozen=True)
class SandboxRow:
    name: str
    pool: str
    status: Status
    session: str | None
    bound_at: float | None
    from_snapshot: str | None
    paused_by: str | None  # 'api' or 'idle'
    last_activity: float | None
    cpu_ns: int | None
    detail: str | None  # why it is unhealthy, quarantined or expired, or what happened to its last session
    # The size class its session claimed (sandstack.runtime.sizes), which its reset undoes; None: the pool's own.
    size: str | None = None
    # The pool's own limits when it was claimed at `size` (Docker's update body, JSON): what its reset gives back if
    # a reload removed the pool's classes meanwhile.
    restore: str | None = None
    # The limits the runtime last set on it, as '<Docker Id> <update body JSON>': a claim that wants the same limits
    # on the same container makes no Docker call (sandstack.runtime.sizes.applied).
    applied: str | None = None


@dataclass(frozen=True)
class Binding:
    """The container a session's binding was first seen on (Docker's Id and Created)."""

    sandbox: str
    session: str
    bound_at: float | None
    container: str
    created: str | None


@dataclass(frozen=True)
class TokenRow:
    """A session's token, as stored: its SHA-256 digest (the token itself is never stored), the binding it is for."""

    digest: str
    session: str
    sandbox: str
    pool: str
    bound_at: float | None
    expires_at: float


@dataclass(frozen=True)
class SshKeyRow:
    """A public key a claim registered for its session's SSH logins ('<algorithm> <base64>', no comment)."""

    session: str
    key: str
    sandbox: str
    bound_at: float | None


@dataclass(frozen=True)
class SnapshotRow:
    id: str
    pool: str
    sandbox: str
    session: str | None
    created_at: float
    size: int
    paths: str  # the writable paths saved, '\n'-separated, in the order of the stored tars


class Store:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: transactions are exactly the explicit BEGIN IMMEDIATE ... COMMIT below.
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        self._touched: dict[str, float] = {}  # sandbox → last_activity as this store's own touch committed it
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            # No fsync at each commit (WAL's checkpoints still sync): a commit took ~6 ms of fsync on this
            # project's machines, and every claim commits under the one lock, so 200 concurrent claims waited
            # over a second in line. A power loss (not a crash of the runtime) may drop the last commits; the
            # file stays consistent, and the runtime's start matches the store to Docker again.
            self._db.execute("PRAGMA synchronous=NORMAL")
            # Nor does a commit checkpoint (SQLite's default every 1,000 pages: copying the WAL into the file and
            # syncing it, under the one lock, while the request that committed and every claim behind it waited);
            # the monitor checkpoints on a connection of its own (checkpoint()).
            self._db.execute("PRAGMA wal_autocheckpoint=0")
            self._db.execute("PRAGMA busy_timeout=5000")
            self._db.executescript(SCHEMA)
            columns = {row["name"] for row in self._db.execute("PRAGMA table_info(sandboxes)")}
            for column in ("size", "restore", "applied"):  # a state volume written before size classes
                if column not in columns:
                    self._db.execute(f"ALTER TABLE sandboxes ADD COLUMN {column} TEXT")
        self._path = path
        self._checkpointer: sqlite3.Connection | None = None

    def checkpoint(self) -> tuple[int, int]:
        """The WAL's committed pages copied into the database file, on a connection of its own and without the
        store's lock: a PASSIVE checkpoint takes no lock a commit needs, so requests go on meanwhile. (pages in the
        WAL, pages copied): equal when it caught up."""
        if self._checkpointer is None:
            self._checkpointer = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        _, logged, copied = self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return logged, copied

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """No other thread commits meanwhile (a claim's binding waits): reads and writes inside see one state."""
        with self._lock:
            yield

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic change: commits when the block ends, rolls back on any exception."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def sync_declared(self, pools: dict[str, tuple[str, ...]]) -> None:
        """Adds the configured sandboxes and forgets ones no longer declared (their sessions end with them)."""
        with self.transaction() as db:
            declared = {name: pool for pool, names in pools.items() for name in names}
            for name, pool in declared.items():
                db.execute("INSERT INTO sandboxes (name, pool) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET "
                           "pool = excluded.pool", (name, pool))
            marks = ",".join("?" * len(declared))
            db.execute(f"DELETE FROM sandboxes WHERE name NOT IN ({marks})", tuple(declared))

    def sandbox(self, name: str) -> SandboxRow | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM sandboxes WHERE name = ?", (name,)).fetchone()
        return SandboxRow(**row) if row else None

    def sandboxes(self, pool: str | None = None) -> list[SandboxRow]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM sandboxes WHERE ? IS NULL OR pool = ? ORDER BY pool, name",
                                    (pool, pool)).fetchall()
        return [SandboxRow(**row) for row in rows]

    def idle(self, pool: str) -> list[str]:
        """The pool's idle sandboxes by name (a claim's candidates: the names alone, read often)."""
        with self._lock:
            rows = self._db.execute("SELECT name FROM sandboxes WHERE pool = ? AND status = 'idle' ORDER BY name",
                                    (pool,)).fetchall()
        return [row["name"] for row in rows]

    def by_session(self, session: str) -> SandboxRow | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM sandboxes WHERE session = ?", (session,)).fetchone()
        return SandboxRow(**row) if row else None

    def with_session_id(self, session: str) -> list[SandboxRow]:
        """The rows whose session has this id, in any scope (sandstack.runtime.session_keys), or none."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM sandboxes WHERE session = ? OR (instr(session, '/') > 0 AND "
                                    "substr(session, instr(session, '/') + 1) = ?) ORDER BY name",
                                    (session, session)).fetchall()
        return [SandboxRow(**row) for row in rows]

    def rename_session(self, old: str, new: str) -> bool:
        """A session (and its snapshots) under another key; False when `old` no longer holds a sandbox."""
        with self.transaction() as db:
            if db.execute("UPDATE sandboxes SET session = ? WHERE session = ?", (new, old)).rowcount != 1:
                return False
            db.execute("UPDATE snapshots SET session = ? WHERE session = ?", (new, old))
            return True

    def update(self, name: str, db: sqlite3.Connection | None = None, **fields: object) -> None:
        self.update_if(name, {}, db, **fields)

    def update_if(self, name: str, expect: dict[str, object], db: sqlite3.Connection | None = None,
                  **fields: object) -> bool:
        """Compare-and-set: the change only if the row still holds `expect` (a status, a session...); whether it
        did. A decision taken on a row read before a Docker call must not undo what another thread did meanwhile
        (a claim that bound it, a release)."""
        if "last_activity" in fields:
            self._touched.pop(name, None)  # set by another change: the next touch writes
        assignments = ", ".join(f"{key} = ?" for key in fields)
        conditions = "".join(f" AND {key} IS ?" for key in expect)  # IS: a NULL session compares equal
        sql = f"UPDATE sandboxes SET {assignments} WHERE name = ?{conditions}"
        params = (*fields.values(), name, *expect.values())
        if db is not None:
            return db.execute(sql, params).rowcount == 1
        with self.transaction() as tx:
            return tx.execute(sql, params).rowcount == 1

    def touch(self, name: str) -> None:
        """API activity: the idle clock restarts (written when the last touch is TOUCH_EVERY old or more, or
        another change set the clock since)."""
        now = time.time()
        with self._lock:
            last = self._touched.get(name)
            if last is not None and 0 <= now - last < TOUCH_EVERY:
                return
            self.update(name, last_activity=now)
            self._touched[name] = now

    # Snapshots

    def add_snapshot(self, row: SnapshotRow) -> None:
        with self.transaction() as db:
            db.execute("INSERT INTO snapshots VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (row.id, row.pool, row.sandbox, row.session, row.created_at, row.size, row.paths))

    def snapshot(self, snapshot_id: str) -> SnapshotRow | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM snapshots WHERE id = ?", (snapshot_id,)).fetchone()
        return SnapshotRow(**row) if row else None

    def snapshots(self, pool: str | None = None, session: str | None = None) -> list[SnapshotRow]:
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM snapshots WHERE (? IS NULL OR pool = ?) AND (? IS NULL OR session = ?) "
                "ORDER BY created_at DESC, id", (pool, pool, session, session)).fetchall()
        return [SnapshotRow(**row) for row in rows]

    # The container of a binding, and sessions ended by the runtime

    def binding(self, sandbox: str) -> Binding | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM bindings WHERE sandbox = ?", (sandbox,)).fetchone()
        return Binding(**row) if row else None

    def bind_container(self, binding: Binding) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO bindings VALUES (?, ?, ?, ?, ?)",
                       (binding.sandbox, binding.session, binding.bound_at, binding.container, binding.created))

    def forget_binding(self, sandbox: str) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM bindings WHERE sandbox = ?", (sandbox,))

    def end_session(self, session: str, sandbox: str, at: float, cause: str, keep: float) -> None:
        """Records why the runtime ended `session`; forgets records older than `keep` seconds."""
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO ended VALUES (?, ?, ?, ?)", (session, sandbox, at, cause))
            db.execute("DELETE FROM ended WHERE at < ?", (at - keep,))

    def forget_ended(self, session: str) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM ended WHERE session = ?", (session,))

    def ended(self, session: str) -> tuple[str, float, str] | None:
        """(sandbox, when, why) of a session the runtime ended, or None."""
        with self._lock:
            row = self._db.execute("SELECT sandbox, at, cause FROM ended WHERE session = ?", (session,)).fetchone()
        return (row[0], row[1], row[2]) if row else None

    # Session tokens

    def add_token(self, row: TokenRow) -> None:
        with self.transaction() as db:
            db.execute("INSERT INTO session_tokens VALUES (?, ?, ?, ?, ?, ?)",
                       (row.digest, row.session, row.sandbox, row.pool, row.bound_at, row.expires_at))

    def tokens(self) -> list[TokenRow]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM session_tokens").fetchall()
        return [TokenRow(**row) for row in rows]

    def drop_tokens(self, digests: list[str]) -> None:
        with self.transaction() as db:
            db.executemany("DELETE FROM session_tokens WHERE digest = ?", [(digest,) for digest in digests])

    # SSH keys (sandstack.runtime.ssh_keys)

    def set_ssh_keys(self, session: str, rows: list[SshKeyRow]) -> None:
        """The session's keys are `rows` from now on (none: it has none)."""
        with self.transaction() as db:
            db.execute("DELETE FROM ssh_keys WHERE session = ?", (session,))
            db.executemany("INSERT INTO ssh_keys VALUES (?, ?, ?, ?)",
                           [(r.session, r.key, r.sandbox, r.bound_at) for r in rows])

    def ssh_keys(self) -> list[SshKeyRow]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM ssh_keys").fetchall()
        return [SshKeyRow(**row) for row in rows]

    def drop_ssh_keys(self, sandbox: str) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM ssh_keys WHERE sandbox = ?", (sandbox,))

    def delete_snapshot(self, snapshot_id: str) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM snapshots WHERE id = ?", (snapshot_id,))
