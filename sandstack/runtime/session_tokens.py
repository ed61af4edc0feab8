"""A session's own token (docs/design/runtime.md, "Session tokens"): a claim answers with a token for that session
only, so a platform can hand a session's sandbox to one user's agent or browser and nobody else.

A token is random (32 bytes), shown once (in the claim's answer) and stored as its SHA-256 digest on the state
volume, with the binding it was given for: the session, its sandbox and the binding's `bound_at`. It acts on that
sandbox's exec, processes, terminals, files, archive, snapshots of that session, pause, hibernate and resume, and on
nothing else (404 for every other session, 403 for what acts on a pool or the host: sandstack.runtime.tokens). It
ends at the release of its session, when the binding ends any other way (the sandbox died, was reset, retired: the
binding it names is gone), or when its lifetime passes (the claim's `token_lifetime`, default a day). Each claim of the
session answers with a new token; a session keeps at most KEPT live ones, the oldest dropped first. Tokens outlive a
restart of the runtime: a released session's are gone, a live one's still act.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from typing import Callable

from sandstack.runtime.store import SandboxRow, Store, TokenRow
from sandstack.runtime.tokens import Scope

PREFIX = "sst_"  # tells a session's token from the declared ones at a glance (and in a secret scanner)
DEFAULT_LIFETIME = 24 * 3600  # seconds, when a claim declares none
MAX_LIFETIME = 30 * 24 * 3600
KEPT = 16  # live tokens per session at most (a platform that claims again at every request mints one each time)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode(errors="surrogateescape")).hexdigest()


def scope_name(session: str) -> str:
    """What the audit log names a session's token by: its session (key: its scope and id), never the token."""
    return f"session:{session}"


class SessionTokens:
    def __init__(self, store: Store, clock: Callable[[], float] = time.time):
        self.store, self.clock = store, clock
        self._lock = threading.Lock()
        self._live: dict[str, TokenRow] = {row.digest: row for row in store.tokens()}

    def mint(self, row: SandboxRow, lifetime: int = DEFAULT_LIFETIME) -> tuple[str, float]:
        """A new token for the session bound to `row`; (the token, when it expires)."""
        assert row.session is not None
        token = PREFIX + secrets.token_urlsafe(32)
        record = TokenRow(digest(token), row.session, row.name, row.pool, row.bound_at,
                          self.clock() + min(max(lifetime, 1), MAX_LIFETIME))
        with self._lock:
            mine = sorted((r for r in self._live.values() if r.session == row.session), key=lambda r: r.expires_at)
            dropped = [r.digest for r in mine[:max(len(mine) - KEPT + 1, 0)]]
            self.store.add_token(record)
            if dropped:
                self.store.drop_tokens(dropped)
            for old in dropped:
                self._live.pop(old, None)
            self._live[record.digest] = record
        return token, record.expires_at

    def scope(self, given: str) -> Scope | None:
        """The scope of a live session token, or None (not one, unknown, expired)."""
        if not given.startswith(PREFIX):
            return None
        record = self._live.get(digest(given))
        if record is None or record.expires_at <= self.clock():
            return None
        return Scope(scope_name(record.session), frozenset({record.pool}), session=record.session,
                     sandbox=record.sandbox, bound_at=record.bound_at)

    def end(self, session: str) -> None:
        """Every token of the session (its release)."""
        self._drop(lambda record: record.session == session)

    def prune(self, holds: Callable[[TokenRow], bool]) -> int:
        """Drops the tokens that expired and those whose binding ended (`holds`: whether it still stands); how many."""
        now = self.clock()
        return self._drop(lambda record: record.expires_at <= now or not holds(record))

    def _drop(self, gone: Callable[[TokenRow], bool]) -> int:
        with self._lock:
            dropped = [record.digest for record in self._live.values() if gone(record)]
            if dropped:
                self.store.drop_tokens(dropped)
            for old in dropped:
                del self._live[old]
        return len(dropped)

    def count(self, session: str) -> int:
        with self._lock:
            return sum(record.session == session for record in self._live.values())

