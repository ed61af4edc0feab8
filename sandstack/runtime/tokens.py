"""Who a bearer token is: the host's token (operators: every pool, the audit log, the metrics), a scoped token
(`hosts.*.runtime.tokens`), which acts only on the sessions, sandboxes and snapshots of its pools, or a session's
own token (sandstack.runtime.session_tokens), which acts only on its session's sandbox.

For a scoped token, anything of another pool does not exist: it gets the same 404 a name that is on no pool
gets, so a tenant cannot learn another's sandboxes or snapshot ids by probing (and its session ids are its own:
sandstack.runtime.session_keys). For a session's token every other session, sandbox and snapshot does not exist
(404), and what acts on a pool or the host (a claim, a release, the listings, a wake, the operators' reads) is 403.
Tokens are compared in constant time, each against every declared one (the time does not say which scope came
close), and never printed: an error names the scope at most, the audit log names the scope, never the token.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Mapping

from sandstack.plan.runtime import ENV_WAKE_TOKEN, RuntimeConfig
from sandstack.runtime.errors import ApiError, not_found
from sandstack.runtime.session_keys import shown
from sandstack.runtime.store import SandboxRow, SnapshotRow

OPERATOR = "host"  # the scope name the audit log gives the host's own token
WAKE = "ingress-wake"  # the scope name of the ingress's wake token (sandstack.runtime.routes.wake)
MIN_TOKEN = 16


@dataclass(frozen=True)
class Scope:
    name: str
    pools: frozenset[str] | None  # None: every pool (the host's token)
    wake: bool = False  # the ingress's token: no pool of its own, it may only wake a site's sandbox
    # A session's token: the session (its key: sandstack.runtime.session_keys), the sandbox and the binding (its
    # bound_at) it was given for; it acts on nothing else, and on nothing once that binding ended.
    session: str | None = None
    sandbox: str | None = None
    bound_at: float | None = None

    @property
    def operator(self) -> bool:
        return self.pools is None

    def allows(self, pool: str | None) -> bool:
        return self.pools is None or pool in self.pools

    def holds(self, row: SandboxRow) -> bool:
        """Whether this scope may act on the sandbox of `row` (its pool's, or for a session's token its own binding)."""
        if self.session is not None:
            return (row.name, row.session, row.bound_at) == (self.sandbox, self.session, self.bound_at)
        return self.allows(row.pool)


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
            if name in (OPERATOR, WAKE):  # the audit log's and the session keys' names of those tokens
                raise ValueError(f"scope {name!r} has the name of the {'host' if name == OPERATOR else 'ingress'}'s "
                                 f"own token: give it another (the audit log and session ids tell scopes by name)")
            token = environ.get(scope.env, "")
            if len(token) < MIN_TOKEN:
                raise ValueError(f"{scope.env} must hold scope {name!r}'s token of at least {MIN_TOKEN} characters")
            if token in seen:
                raise ValueError(f"scope {name!r}'s token is the same as scope {seen[token]!r}'s: give each its own")
            seen[token] = name
            scoped[name] = (token, frozenset(scope.pools))
        tokens = cls(host_token, scoped)
        wake = environ.get(ENV_WAKE_TOKEN, "")
        if wake:
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


def check_sandbox(scope: Scope, row: SandboxRow, host: str) -> None:
    if not scope.holds(row):
        raise not_found("sandbox", row.name, host)


def check_snapshot(scope: Scope, snapshot: str, snap: SnapshotRow | None, host: str) -> None:
    """A snapshot of the scope's pools (for a session's token: of its session), else 404 as one on no pool."""
    mine = snap is not None and scope.allows(snap.pool) and (scope.session is None or snap.session == scope.session)
    if not mine:
        raise ApiError(404, f"snapshot {snapshot!r} is not on host {host!r}", snapshot=snapshot, host=host)


def pool_level(scope: Scope, what: str) -> None:
    """What acts on a pool (a claim, a release, the listings, a wake) is not a session's token's: 403."""
    if scope.session is not None:
        raise ApiError(403, f"{what} is for the pool's or the host's token; the token of session "
                            f"{shown(scope.session)!r} acts only on its own sandbox", scope=scope.name)


def operator_only(scope: Scope, what: str) -> None:
    """The host-wide reads (audit log, metrics, the API document) are the operators'."""
    if scope.session is not None:
        raise ApiError(403, f"{what} is for the host's token; the token of session {shown(scope.session)!r} acts "
                            "only on its own sandbox", scope=scope.name)
    if not scope.operator:
        raise ApiError(403, f"{what} is for the host's token; token scope {scope.name!r} acts only on its pools' "
                            "sessions and snapshots", scope=scope.name)
