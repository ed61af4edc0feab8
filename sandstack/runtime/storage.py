"""What a pool's copies take of the host's disk: its snapshots and its hibernated sessions' copies of their tmpfs
paths, both on the runtime's state volume, both counted against the pool's `snapshot_storage`, and each session's
against its share (`session_snapshot_storage`: by default the pool's storage divided by its sandboxes on the host),
so that no session can fill the pool's storage for the others.

A copy under way reserves the room it may take (`Storage.room`): concurrent copies never count the same room twice.
A hibernation's copy was not counted at all: three sessions wrote 3 GB beside a pool whose storage showed 40 KB.
"""

from __future__ import annotations

import shutil
import threading
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sandstack.runtime.errors import no_space
from sandstack.runtime.interfaces import Sandboxes
from sandstack.runtime.room import Room
from sandstack.runtime.session_keys import shown
from sandstack.runtime.store import Store

HIBERNATE_DIR = "hibernated"  # under the state dir: <sandbox>/<index of the writable path>.tar


class Copies:
    """The hibernated sessions' copies of their tmpfs paths on the state volume, one directory per sandbox
    (sandstack.runtime.hibernate writes and reads them)."""

    def __init__(self, state_dir: Path):
        self.dir = state_dir / HIBERNATE_DIR
        self.dir.mkdir(parents=True, exist_ok=True)

    def path(self, name: str) -> Path:
        return self.dir / name

    def size(self, name: str) -> int:
        """Bytes of a sandbox's copy (0: none)."""
        try:
            return sum(f.stat().st_size for f in self.path(name).iterdir())
        except OSError:
            return 0

    def discard(self, name: str) -> None:
        shutil.rmtree(self.path(name), ignore_errors=True)


class Storage:
    def __init__(self, sandboxes: Sandboxes, store: Store, copies: Copies):
        self.sandboxes, self.store, self.copies = sandboxes, store, copies
        self._lock = threading.Lock()
        self._reserved: Counter[str] = Counter()  # pool → bytes that copies under way may still take
        self._reserved_by: Counter[tuple[str, str | None]] = Counter()  # (pool, session) → the same

    def usage(self, pool: str, session: str | None = None) -> int:
        """Bytes the pool's snapshots and hibernation copies take on this host (one session's, when given)."""
        snaps = sum(snap.size for snap in self.store.snapshots(pool=pool, session=session))
        copies = sum(self.copies.size(row.name) for row in self.store.sandboxes(pool)
                     if session is None or row.session == session)
        return snaps + copies

    def hibernated_bytes(self, pool: str) -> int:
        """Bytes the pool's hibernated sessions' copies take on this host."""
        return sum(self.copies.size(row.name) for row in self.store.sandboxes(pool))

    @contextmanager
    def room(self, pool: str, session: str | None) -> Iterator[Room]:
        """Room for one copy of a session of the pool, reserved while the block runs; 507 when the pool's storage
        or the session's share is used up already."""
        spec, host = self.sandboxes.pool(pool), self.sandboxes.host
        share = spec.session_snapshot_storage_bytes
        with self._lock:
            room = Room(host, pool, session, spec.download_limit_bytes, spec.snapshot_storage_bytes,
                        self.usage(pool) + self._reserved[pool], share,
                        self.usage(pool, session) + self._reserved_by[(pool, session)] if share is not None else 0)
            if room.used >= room.total:
                raise no_space(f"pool {pool!r} has used {room.used} of its snapshot_storage of {room.total} bytes on "
                               f"host {host!r} (its snapshots and its hibernated sessions' copies); delete "
                               "snapshots (DELETE /v1/snapshots/ID) to make room", pool=pool, used=room.used,
                               limit=room.total)
            if share is not None and room.session_used >= share:
                raise no_space(f"session {shown(session)!r} has used {room.session_used} of its share of pool {pool!r}'s "
                               f"snapshot_storage ({share} bytes: session.session_snapshot_storage) on host "
                               f"{host!r}; delete its snapshots (DELETE /v1/snapshots/ID) to make room",
                               pool=pool, session=shown(session), used=room.session_used, limit=share)
            bound = room.bound
            self._reserved[pool] += bound
            self._reserved_by[(pool, session)] += bound
        try:
            yield room
        finally:
            with self._lock:
                self._reserved[pool] -= bound
                self._reserved_by[(pool, session)] -= bound
