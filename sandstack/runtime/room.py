"""The room one copy of a session may take of its pool's snapshot storage (sandstack.runtime.storage reserves it), and
the answer naming which bound a copy passed."""

from __future__ import annotations

from dataclasses import dataclass

from sandstack.runtime.errors import ApiError, no_space, too_big
from sandstack.runtime.session_keys import shown
from sandstack.runtime.tarcheck import PastBound


@dataclass(frozen=True)
class Room:
    """The bytes one copy may take (`bound`) and what bounds it."""

    host: str
    pool: str
    session: str | None
    download_limit: int
    total: int  # the pool's snapshot_storage
    used: int  # of it, by the pool's copies and the reservations of those under way
    share: int | None  # the session's share of it (None: no share)
    session_used: int

    @property
    def bound(self) -> int:
        return min(self.download_limit, self.total - self.used, *self._share_left())

    def _share_left(self) -> tuple[int, ...]:
        return () if self.share is None else (self.share - self.session_used,)

    def past(self, what: str, error: PastBound, **fields: object) -> ApiError:
        """The answer for a copy `what` ('the snapshot of sandbox X') cut at its bound: which bound it was."""
        bound = self.bound
        if self.share is not None and bound == self.share - self.session_used and bound < self.total - self.used:
            return no_space(f"{what} passed the {bound} bytes left of session {shown(self.session)!r}'s share of pool "
                            f"{self.pool!r}'s snapshot_storage ({self.share} bytes: session.session_snapshot_storage; "
                            f"{self.session_used} used on host {self.host!r}); it was stopped there and nothing was "
                            "kept", pool=self.pool, session=shown(self.session), used=self.session_used, limit=self.share)
        if bound < self.download_limit:
            return no_space(f"{what} passed the {bound} bytes left of pool {self.pool!r}'s snapshot_storage of "
                            f"{self.total} bytes ({self.used} used on host {self.host!r}); it was stopped there and "
                            "nothing was kept", pool=self.pool, used=self.used, limit=self.total)
        return too_big(what, bound, **fields)
