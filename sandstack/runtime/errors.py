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
