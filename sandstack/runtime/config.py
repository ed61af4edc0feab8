"""The configuration in force (sandstack.plan.runtime's `RuntimeConfig`), held in one place every part reads at each
use: a reload (sandstack.runtime.reload) swaps it whole, without a restart, and no part keeps a pool's settings
across calls.

A pool a reload removed while some of its sandboxes were bound is *retired*: its settings are kept here for those
sessions (their exec, files, snapshots and release go on as before) until the last of them ends; it takes no new
claim (404, as a pool the host never had) and is not listed. docs/design/runtime.md, "Live configuration".
"""

from __future__ import annotations

import threading

from sandstack.plan.runtime import PoolRuntime, RuntimeConfig


class Live:
    def __init__(self, config: RuntimeConfig, digest: str | None = None):
        self._config = config
        self._lock = threading.Lock()
        self.digest = digest  # the configuration set's (None: the environment's, at start)
        self._retired: dict[str, PoolRuntime] = {}
        # A bound sandbox of a declared pool that the configuration no longer names (an on-demand place above a
        # lowered ceiling, a warm one past fewer replicas) → (its pool, whether it was an on-demand place).
        self._retired_places: dict[str, tuple[str, bool]] = {}

    @property
    def config(self) -> RuntimeConfig:
        return self._config

    @property
    def host(self) -> str:
        return self._config.host

    def declared(self, pool: str) -> PoolRuntime | None:
        """The pool's settings if the configuration in force declares it."""
        return self._config.pools.get(pool)

    def settings(self, pool: str) -> PoolRuntime | None:
        """A declared pool's settings, or a retired one's (its bound sessions still use them)."""
        with self._lock:
            return self._config.pools.get(pool) or self._retired.get(pool)

    def retired(self) -> dict[str, PoolRuntime]:
        with self._lock:
            return dict(self._retired)

    def pool_of(self, sandbox: str) -> str | None:
        """The pool a sandbox name belongs to (a retired pool's too)."""
        found = self._config.pool_of(sandbox)
        if found is not None:
            return found
        with self._lock:
            if sandbox in self._retired_places:
                return self._retired_places[sandbox][0]
            return next((pool for pool, spec in self._retired.items() if sandbox in spec.places), None)

    def swap(self, config: RuntimeConfig, digest: str | None, held: dict[str, str]) -> None:
        """`config` in force from now on. `held`: each sandbox a session holds → its pool. A pool `config` no longer
        declares is retired while a held sandbox is of it (else forgotten); a held sandbox of a declared pool that
        `config` no longer names is a retired place of that pool until its session ends."""
        with self._lock:
            old = {**self._retired, **self._config.pools}
            self._retired = {pool: old[pool] for pool in set(held.values())
                             if pool not in config.pools and pool in old}
            was_place = {name: bool(spec.ondemand and name in spec.ondemand.places) for spec in old.values()
                         for name in spec.places}
            self._retired_places = {
                name: (pool, was_place.get(name, self._retired_places.get(name, (pool, False))[1]))
                for name, pool in held.items() if pool in config.pools and name not in config.pools[pool].places}
            self._config, self.digest = config, digest

    def retired_places(self) -> dict[str, tuple[str, bool]]:
        with self._lock:
            return dict(self._retired_places)

    def retired_place(self, sandbox: str) -> bool:
        """Whether `sandbox` is an on-demand place its pool no longer has (its session goes on until it ends)."""
        with self._lock:
            return self._retired_places.get(sandbox, ("", False))[1]

    def forget_place(self, sandbox: str) -> None:
        with self._lock:
            self._retired_places.pop(sandbox, None)

    def forget(self, pool: str) -> None:
        """A retired pool whose last session ended."""
        with self._lock:
            self._retired.pop(pool, None)
