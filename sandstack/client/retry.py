"""When the client tries a call again on the same host, and how long it waits first.

A connection that was never made (refused, timed out while connecting) is retried for every call: the runtime
never saw it. A connection that broke after the request was sent is retried only for calls that change nothing
twice (GET, PUT, DELETE), and for a claim: a second POST could start a command twice, but a claim is answered by
session (the same sandbox, or 'creating' while another try creates it on demand, which the client waits out), so
a claim whose answer was lost is sent again rather than failed over to another host, where the session would be
bound twice. A 503 is retried (the host's Docker
daemon did not answer), but not a claim's 'no capacity': a claim never waits for a sandbox, it fails over to the
pool's next host at once. A DELETE answered 404 after an earlier try of it broke once sent is done: that try
may have reached the runtime, which answered into a lost connection, and what was to go is gone either way (a
release is not reported as a failure because its first answer was lost). Delays grow exponentially with jitter, so clients that failed together do not come back
together.

An answer that names when to come back (`Retry-After`: seconds, or an HTTP date) is tried again then instead, on
a 503 the client retries and on a 429; at most `max_retry_after` seconds (30 by default): a longer one is raised at
once, its message naming the Retry-After and the bound, rather than holding the caller for minutes.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from datetime import timezone
from email.utils import parsedate_to_datetime

import httpx

IDEMPOTENT = {"GET", "HEAD", "PUT", "DELETE", "OPTIONS"}


@dataclass(frozen=True)
class Retry:
    attempts: int = 3  # tries in all, the first included
    backoff: float = 0.1  # seconds before the second try; doubled each time after
    max_backoff: float = 2.0
    max_retry_after: float = 30.0  # seconds: the longest Retry-After waited; a longer one is raised

    def delay(self, attempt: int) -> float:
        """Seconds to wait after the `attempt`th try (from 1) failed."""
        return min(self.backoff * 2 ** (attempt - 1), self.max_backoff) * random.uniform(0.5, 1.0)

    def on_error(self, method: str, error: httpx.TransportError, idempotent: bool = False) -> bool:
        """`idempotent`: a call the runtime answers the same when it comes twice, whatever its method."""
        if isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout)):
            return True
        return (idempotent or method.upper() in IDEMPOTENT) and isinstance(error, (httpx.ReadError, httpx.RemoteProtocolError,
                                                                   httpx.WriteError, httpx.ReadTimeout))

    @staticmethod
    def reached(error: httpx.TransportError) -> bool:
        """Whether a try that failed with `error` may have reached the runtime (it was sent)."""
        return not isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout))

    @staticmethod
    def gone_already(method: str, status: int, reached_before: bool) -> bool:
        return reached_before and status == 404 and method.upper() == "DELETE"

    def on_status(self, status: int, message: str, retry_after: float | None = None) -> bool:
        """`retry_after`: the seconds the answer's Retry-After asks for (None: it has none)."""
        return (status == 503 and "no capacity" not in message) or (status == 429 and retry_after is not None)


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """The seconds a Retry-After header asks for: a number of seconds, or an HTTP date (from `now`, the clock's
    time when None); None when there is none or it is neither."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # '-0000': UTC, as every HTTP date is
        when = when.replace(tzinfo=timezone.utc)
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)


NO_RETRY = Retry(attempts=1)
