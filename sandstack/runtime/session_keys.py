"""Session ids are kept per token scope: the session a scope names `chat-42` is `<scope>/chat-42` in the store, so a
tenant's claim of an id another tenant holds binds a sandbox of its own instead of answering 404 (which told it the
other's ids). Every answer shows the id as the caller gave it (`shown`). A row written before this (its session
without a scope) belongs to the first scope allowed on its pool that names it (sandstack.runtime.sessions)."""

from __future__ import annotations

SEPARATOR = "/"  # no session id and no scope name holds one (models.SESSION_PATTERN, the spec's names)


def key(owner: str, session: str) -> str:
    return f"{owner}{SEPARATOR}{session}"


def shown(key_: str | None) -> str | None:
    """The id as its scope named it."""
    return None if key_ is None else key_.rpartition(SEPARATOR)[2]


def owner(key_: str) -> str | None:
    """The scope a session belongs to; None for a row written before sessions were kept per scope."""
    scope, separator, _ = key_.rpartition(SEPARATOR)
    return scope if separator else None
