"""The client's errors: one class per kind of refusal, so a caller catches what it can act on
(`except NotFound`, `except NoCapacity`) instead of reading status codes. Each is a SandstackError carrying the
HTTP status, the runtime's one-sentence message and its fields."""

from __future__ import annotations

from typing import Any, Mapping


class SandstackError(Exception):
    """An error answer of a runtime: its HTTP status and the runtime's one-sentence message."""

    def __init__(self, status: int, message: str, body: Mapping[str, Any] | None = None, host: str | None = None):
        super().__init__(f"{host}: {message}" if host else message)
        self.status, self.message, self.body, self.host = status, message, dict(body or {}), host


class InvalidRequest(SandstackError):
    """422: the request breaks a rule the message names."""


class Unauthorized(SandstackError):
    """401: the host's token was wrong."""


class Forbidden(SandstackError):
    """403: a path outside the workspace, or one the sandbox's user may not read."""


class NotFound(SandstackError):
    """404: no such pool, session, sandbox, snapshot, file or process (another session's process included)."""


class Conflict(SandstackError):
    """409: the sandbox is not in a state for it (paused, busy, not bound), or a path is of the wrong kind."""


class TooLarge(SandstackError):
    """413: past an upload or download limit."""


class Unavailable(SandstackError):
    """503 (the host's Docker daemon does not answer) or no answer at all, after the retries."""


class NoCapacity(Unavailable):
    """503: no idle sandbox of the pool (on any host of the pool, after failover)."""


class HostUnavailable(Unavailable):
    """A host does not answer (its sandboxes and sessions are lost while it is away), or no host of the pool did."""


class Timeout(SandstackError):
    """504, or a wait whose time ran out while the process still runs."""


class NoSpace(SandstackError):
    """507: a filesystem (the sandbox's, the host's state volume) or the pool's snapshot storage is full."""


class CommandFailed(SandstackError):
    """A command run with `check=True` exited non-zero; `result` is what it gave."""

    def __init__(self, result: Any, host: str | None = None):
        super().__init__(200, f"command exited with {result.exit_code}: {result.stderr.strip()[-500:] or 'no stderr'}",
                         {"exit_code": result.exit_code}, host)
        self.result = result


BY_STATUS: dict[int, type[SandstackError]] = {401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict,
                                              413: TooLarge, 422: InvalidRequest, 503: Unavailable, 504: Timeout,
                                              507: NoSpace}


def host_lost(host: str, error: Exception) -> HostUnavailable:
    """A host whose connection failed after the retries: it is lost (or unreachable), and so is whatever runs on
    it; the claim fails over on this (sync and async clients alike)."""
    return HostUnavailable(503, f"does not answer ({type(error).__name__})", {"host": host}, host)


def error_for(status: int, message: str, body: Mapping[str, Any] | None, host: str | None) -> SandstackError:
    kind = BY_STATUS.get(status, SandstackError)
    if status == 503 and "no capacity" in message:
        kind = NoCapacity
    return kind(status, message, body, host)
