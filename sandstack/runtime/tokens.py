"""Who a bearer token is: the host's token (operators: every pool, the audit log, the metrics) or a scoped
token (`hosts.*.runtime.tokens`), which acts only on the sessions, sandboxes and snapshots of its pools.

For a scoped token, anything of another pool does not exist: it gets the same 404 a name that is on no pool
gets, so a tenant cannot learn another's session ids, sandboxes or snapshot ids by probing. Tokens are compared
in constant time, each against every declared one (the time does not say which scope came close), and never
printed: an error names the scope at most, the audit log names the scope, never the token.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Mapping

from sandstack.plan.runtime import ENV_WAKE_TOKEN, RuntimeConfig
from sandstack.runtime.errors import ApiError, not_found
from sandstack.runtime.store import Store

OPERATOR = "host"  # the scope name the audit log gives the host's own token
WAKE = "ingress-wake"  # the scope name of the ingress's wake token (sandstack.runtime.routes.wake)
MIN_TOKEN = 16


@dataclass(frozen=True)
class Scope:
    name: str
    pools: frozenset[str] | None  # None: every pool (the host's token)
    wake: bool = False  # the ingress's token: no pool of its own, it may only wake a site's sandbox

    @property
    def operator(self) -> bool:
        return self.pools is None

    def allows(self, pool: str | None) -> bool:
        return self.pools is None or pool in self.pools


class Tokens:
    def __init__(self, host_token: str, scoped: Mapping[str, tuple[str, frozenset[str]]] | None = None):
        """`scoped`: scope name → (its token, its pools)."""
        self._entries = [(host_token.encode(), Scope(OPERATOR, None))]
        self._entries += [(token.encode(), Scope(name, pools)) for name, (token, pools) in (scoped or {}).items()]

    @classmethod
    def from_environment(cls, host_token: str, config: RuntimeConfig, environ: Mapping[str, str]) -> Tokens:
        """The scoped tokens the config declares, each from its environment variable; ValueError names the scope
        (never the value) when one is missing, too short or the same as another."""
        scoped: dict[str, tuple[str, frozenset[str]]] = {}
        seen = {host_token: OPERATOR}
        for name, scope in config.tokens.items():
            token = environ.get(scope.env, "")
            if len(token) < MIN_TOKEN:
                raise ValueError(f"{scope.env} must hold scope {name!r}'s token of at least {MIN_TOKEN} characters")
            if token in seen:
                raise ValueError(f"scope {name!r}'s token is the same as scope {seen[token]!r}'s: give each its own")
            seen[token] = name
            scoped[name] = (token, frozenset(scope.pools))
        tokens = cls(host_token, scoped)
        wake = environ.get(ENV_WAKE_TOKEN, "")
        if wake and config.sites:
            if len(wake) < MIN_TOKEN:
                raise ValueError(f"{ENV_WAKE_TOKEN} must hold the ingress's token of at least {MIN_TOKEN} characters")
            if wake in seen:
                raise ValueError(f"the ingress's wake token is the same as scope {seen[wake]!r}'s: give each its own")
            tokens._entries.append((wake.encode(), Scope(WAKE, frozenset(), wake=True)))
        return tokens

    def scope(self, given: str) -> Scope | None:
        """The scope of token `given`, or None. Every entry is compared, whichever matches."""
        found = None
        for token, scope in self._entries:
            if hmac.compare_digest(given.encode(), token) and found is None:
                found = scope
        return found


def check_pool(scope: Scope, pool: str, host: str) -> None:
    if not scope.allows(pool):
        raise not_found("pool", pool, host)


def check_sandbox(scope: Scope, sandbox: str, pool: str | None, host: str) -> None:
    if not scope.allows(pool):
        raise not_found("sandbox", sandbox, host)


def check_session(scope: Scope, session: str, pool: str | None, host: str) -> None:
    if not scope.allows(pool):
        raise not_found("session", session, host)


def check_snapshot(scope: Scope, snapshot: str, pool: str | None, host: str) -> None:
    if not scope.allows(pool):
        raise ApiError(404, f"snapshot {snapshot!r} is not on host {host!r}", snapshot=snapshot, host=host)


def check_claim(scope: Scope, store: Store, host: str, pool: str, session: str, from_snapshot: str | None) -> None:
    """A claim names its pool, maybe a snapshot to branch from, and a session that may be bound already: each must
    be the scope's (checked before anything is bound)."""
    check_pool(scope, pool, host)
    if from_snapshot:
        snap = store.snapshot(from_snapshot)
        check_snapshot(scope, from_snapshot, snap.pool if snap else None, host)
    existing = store.by_session(session)
    if existing is not None:
        check_session(scope, session, existing.pool, host)


def operator_only(scope: Scope, what: str) -> None:
    """The host-wide reads (audit log, metrics, the API document) are the operators'."""
    if not scope.operator:
        raise ApiError(403, f"{what} is for the host's token; token scope {scope.name!r} acts only on its pools' "
                            "sessions and snapshots", scope=scope.name)
