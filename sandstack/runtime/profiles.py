"""A session's network profile (docs/design/network-profiles.md): which of its template's declared egress policies
the gateway applies to its sandbox. The gateway holds every profile's rules; what it reads per request is one line
per sandbox address not in the start profile, in its configuration volume, which this part writes through the
backend (`set_profile`) and keeps, with the address it was written for, in the runtime's state (a restarted runtime
knows what the gateway enforces). A session's end puts its sandbox back in the start profile."""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from sandstack.runtime.backend import BackendError, SandboxBackend
from sandstack.runtime.config import Live
from sandstack.runtime.errors import ApiError, conflict

log = logging.getLogger("sandstack.runtime")
STATE_FILE = "network-profiles.json"


@dataclass(frozen=True)
class Switch:
    pool: str
    profile: str  # in force now
    previous: str | None  # before this call (None: no switch was made)
    start: str
    profiles: tuple[str, ...]


class NetworkProfiles:
    def __init__(self, live: Live, backend: SandboxBackend, state_dir: Path):
        self.live, self.backend = live, backend
        self._path = state_dir / STATE_FILE
        self._lock = threading.Lock()
        # sandbox → (its profile, the address its record was written for); a sandbox in its start profile: absent.
        self._held: dict[str, tuple[str, str]] = self._load()

    def _load(self) -> dict[str, tuple[str, str]]:
        try:
            data = json.loads(self._path.read_text())
            return {name: (str(v[0]), str(v[1])) for name, v in data.items()}
        except FileNotFoundError:
            return {}
        except (ValueError, TypeError, IndexError, AttributeError) as error:
            log.warning("network profiles: %s is unreadable (%s); every sandbox is taken as in its start profile",
                        self._path, error)
            return {}

    def _save(self) -> None:
        tmp = self._path.with_name(f".{STATE_FILE}.{os.getpid()}")
        tmp.write_text(json.dumps({k: list(v) for k, v in sorted(self._held.items())}))
        tmp.replace(self._path)

    def _declared(self, pool: str) -> tuple[tuple[str, ...], str]:
        spec = self.live.settings(pool)
        if spec is None or not spec.network_profiles or spec.start_profile is None:
            raise conflict(f"pool {pool!r} declares no network profiles: its template has one `network`, which "
                           "no call changes", pool=pool)
        return spec.network_profiles, spec.start_profile

    def current(self, sandbox: str, pool: str) -> Switch:
        profiles, start = self._declared(pool)
        with self._lock:
            held = self._held.get(sandbox)
        return Switch(pool, held[0] if held else start, None, start, profiles)

    def switch(self, sandbox: str, pool: str, profile: str) -> Switch:
        """`sandbox` in `profile` from its next request on; refused (nothing changed) for a profile its template
        does not declare, or when the gateway's record cannot be written."""
        profiles, start = self._declared(pool)
        if profile not in profiles:
            raise ApiError(422, f"network profile {profile!r} is not declared for pool {pool!r}; its profiles: "
                                f"{', '.join(profiles)}", pool=pool, profile=profile, profiles=list(profiles))
        gateway = self.live.config.gateway
        assert gateway is not None  # RuntimeConfig requires it where a pool has profiles
        with self._lock:
            held = self._held.get(sandbox)
            before = held[0] if held else start
            address = self.backend.address(sandbox)
            if address is None:
                raise conflict(f"sandbox {sandbox!r} has no address on its pool's network (is it running?): its "
                               f"network profile stays {before!r}", sandbox=sandbox, profile=before)
            try:
                if held and held[1] != address:  # its address moved (a restart): the old record goes first
                    self.backend.set_profile(gateway, held[1], None)
                self.backend.set_profile(gateway, address, None if profile == start else f"{pool} {profile}",
                                         f"{pool} {profile} {start}")
            except BackendError as error:
                raise ApiError(502, f"the gateway's record of sandbox {sandbox!r} could not be written ({error}); "
                                    f"its network profile stays {before!r}", sandbox=sandbox, profile=before) from error
            if profile == start:
                self._held.pop(sandbox, None)
            else:
                self._held[sandbox] = (profile, address)
            self._save()
        return Switch(pool, profile, before, start, profiles)

    def follow(self, sandbox: str) -> None:
        """`sandbox` runs again (a resume): if its address moved, its record moves with it, so the gateway keeps
        judging it by its profile, never by the start one. Raises BackendError when the record cannot be moved (the
        resume fails then: a sandbox is never left judged by another profile than the one recorded)."""
        with self._lock:
            held = self._held.get(sandbox)
            gateway = self.live.config.gateway
            if held is None or gateway is None:
                return
            address = self.backend.address(sandbox)
            if address is None or address == held[1]:
                return
            pool = self.live.pool_of(sandbox)
            spec = self.live.settings(pool) if pool else None
            start = spec.start_profile if spec else None
            self.backend.set_profile(gateway, address, f"{pool} {held[0]}", f"{pool} {held[0]} {start}")
            self.backend.set_profile(gateway, held[1], None)
            self._held[sandbox] = (held[0], address)
            self._save()

    def reset(self, sandbox: str) -> None:
        """A session on `sandbox` ended: back to the start profile (its gateway record removed). A record that
        cannot be removed now is kept, and removed at the next session's end or switch."""
        with self._lock:
            held = self._held.get(sandbox)
            gateway = self.live.config.gateway
            if held is None or gateway is None:
                return
            try:
                self.backend.set_profile(gateway, held[1], None)
            except BackendError as error:
                log.warning("network profiles: %s stays in %r at the gateway (%s)", sandbox, held[0], error)
                return
            del self._held[sandbox]
            self._save()
