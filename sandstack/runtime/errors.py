"""The runtime's answerable errors: an HTTP status, one sentence naming what was wrong, and a few fields
(pool, host, sandbox...) a client can act on. The app turns them into JSON; nothing else reaches a client."""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, status: int, message: str, /, **fields: object):
        super().__init__(message)
        self.status = status
        self.message = message
        self.fields = fields

    def body(self) -> dict[str, object]:
        return {"error": self.message, **self.fields}


def not_found(what: str, name: str, host: str) -> ApiError:
    return ApiError(404, f"{what} {name!r} is not on host {host!r}", **{what: name, "host": host})


def forbidden(path: str, why: str) -> ApiError:
    return ApiError(403, f"path {path!r} {why}", path=path)


def conflict(message: str, **fields: object) -> ApiError:
    return ApiError(409, message, **fields)


def too_big(doing: str, limit: int, **fields: object) -> ApiError:
    """A transfer past the pool's declared bound (413): it was cut there, nothing of it was kept."""
    return ApiError(413, f"{doing} passed the pool's download_limit of {limit} bytes (apparent size: a sparse file "
                         "counts at its full length); it was stopped there and nothing was kept", limit=limit, **fields)


def no_space(message: str, **fields: object) -> ApiError:
    """Storage ran out (507): the sandbox's filesystem, the host's state volume, or the pool's snapshot storage."""
    return ApiError(507, message, **fields)
