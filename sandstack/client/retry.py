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
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import httpx

IDEMPOTENT = {"GET", "HEAD", "PUT", "DELETE", "OPTIONS"}


@dataclass(frozen=True)
class Retry:
    attempts: int = 3  # tries in all, the first included
    backoff: float = 0.1  # seconds before the second try; doubled each time after
    max_backoff: float = 2.0

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

    def on_status(self, status: int, message: str) -> bool:
        return status == 503 and "no capacity" not in message


NO_RETRY = Retry(attempts=1)
