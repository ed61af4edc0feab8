"""The runtime's parts, made once and joined: each owns its state and reaches the others only through their typed
public methods (docs/design/runtime.md has the map). Nothing here but the wiring, the runtime's stop, and the few
calls the tests and the command line make directly.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Mapping, cast

from sandstack.plan.runtime import DB_FILE, RuntimeConfig
from sandstack.runtime.access import Access
from sandstack.runtime.backend import SandboxBackend
from sandstack.runtime.claims import WarmClaims
from sandstack.runtime.config import Live
from sandstack.runtime.credentials import Credentials
from sandstack.runtime.execs import Execs
from sandstack.runtime.files import Files
from sandstack.runtime.hibernate import Hibernation
from sandstack.runtime.leases import Leases
from sandstack.runtime.metrics import Metrics, NoMetrics
from sandstack.runtime.monitor import Monitor
from sandstack.runtime.ondemand import OnDemandPlaces, Provisioner
from sandstack.runtime.profiles import NetworkProfiles
from sandstack.runtime.processes import Processes
from sandstack.runtime.readiness import Readiness
from sandstack.runtime.reload import NeedsRestart, Refused
from sandstack.runtime.rootsnap import RootSnapshots
from sandstack.runtime.sandboxes import Sandboxes
from sandstack.runtime.session_keys import key
from sandstack.runtime.session_tokens import SessionTokens
from sandstack.runtime.sessions import Sessions
from sandstack.runtime.snapshots import Snapshots
from sandstack.runtime.snapstore import SnapshotStore, Stores
from sandstack.runtime.ssh_keys import SshKeys
from sandstack.runtime.storage import Copies, Storage
from sandstack.runtime.store import SandboxRow, Store
from sandstack.runtime.tokens import OPERATOR
from sandstack.runtime.transfer import Transfers

log = logging.getLogger("sandstack.runtime")
ENDED = "its session ended: the sandbox was reset, which stopped it"


class Runtime:
    def __init__(self, config: RuntimeConfig, backend: SandboxBackend, state_dir: Path, digest: str | None = None,
                 environ: Mapping[str, str] | None = None, snapshot_store: SnapshotStore | None = None):
        """`digest`: the configuration set's that `config` came from (None: the environment's); `environ`: where
        the snapshot store's secrets are (None: none); `snapshot_store`: a store to use in place of the
        configuration's registry (the tests')."""
        self.backend, self.state_dir = backend, state_dir
        self.live = Live(config, digest)
        self.store = Store(state_dir / DB_FILE)
        self.store.sync_declared({pool: spec.places for pool, spec in config.pools.items()})
        self.leases = Leases()  # operations running in a sandbox vs. a pause of it
        self.execs = Execs(backend)
        self.credentials = Credentials()  # run-scoped secrets, in memory only; a reset drops them
        self.sandboxes = Sandboxes(self.live, self.store, backend, self.leases)
        # The backend's own (a test's stand-in has one, the Docker backend its DockerProvisioner).
        provisioner = cast("Provisioner | None", getattr(backend, "provisioner", None))
        self.readiness = Readiness(provisioner, backend)
        self.places = OnDemandPlaces(self.live, self.sandboxes, self.store, provisioner, self.readiness)
        self.copies = Copies(state_dir)
        self.storage = Storage(self.sandboxes, self.store, self.copies)
        self.transfers = Transfers(self.sandboxes, self.execs, state_dir)
        self.hibernation = Hibernation(self.sandboxes, self.transfers, self.execs, self.credentials, self.places,
                                       self.storage, self.copies, self.leases, backend, self.readiness)
        self.access = Access(self.sandboxes, self.hibernation)
        self.files = Files(self.sandboxes, self.access, self.transfers, self.leases)
        self.places.reconcile_quietly()
        # After the store: it ends what a previous run left running.
        self.processes = Processes(self.sandboxes, self.access, self.execs, self.credentials, self.leases, state_dir)
        root = RootSnapshots(self.sandboxes, self.transfers, self.processes, self.credentials, self.execs,
                             self.readiness, self.leases)
        self.snapshots = Snapshots(self.live, self.sandboxes, self.access, self.transfers, self.storage, self.store,
                                   root, self.leases, state_dir, Stores(self.live, environ or {}, snapshot_store))
        self.claims = WarmClaims(self.sandboxes)
        self.session_tokens = SessionTokens(self.store)
        # The public keys claims registered for their sessions' SSH logins (docs/design/ssh.md); a session's end
        # drops them (a key checks its binding at each login all the same).
        self.ssh_keys = SshKeys(self.store)
        self.sandboxes.on_session_end(self.ssh_keys.drop)
        self.sessions = Sessions(self.live, self.sandboxes, self.claims, self.places, self.snapshots,
                                 self.hibernation, self.credentials, self.execs, self.session_tokens)
        self.monitor = Monitor(self.live, self.sandboxes, self.places, self.hibernation, self.snapshots,
                               self.session_tokens)
        # What a session holds besides the container ends with it: its processes, its run-scoped secrets.
        self.sandboxes.on_session_end(lambda name: self.processes.end_session(name, ENDED))
        self.sandboxes.on_session_end(self.credentials.drop)  # whatever the reset's outcome
        # A session's network profile (docs/design/network-profiles.md): its end puts the sandbox back in the start one.
        self.profiles = NetworkProfiles(self.live, backend, state_dir)
        self.sandboxes.on_session_end(self.profiles.reset)
        self.hibernation.on_resumed.append(self.profiles.follow)  # a resumed container may have another address
        # The runtime's own operations feed the app's registry (sandstack.runtime.metrics; the app sets it).
        self.metrics: Metrics | NoMetrics = NoMetrics()

    @property
    def config(self) -> RuntimeConfig:
        return self.live.config

    @property
    def host(self) -> str:
        return self.live.host

    def shutdown(self) -> None:
        """The runtime is stopping (a restart, a renewal, or `pulumi destroy`, which it cannot tell apart): no
        on-demand container is left running without it. Bound ones hibernate (their files kept, resumed by the next
        call after the runtime is back), the others are retired; the stack's networks and volumes can then be
        deleted."""
        if self.places.provisioner is None:
            return
        for row in self.store.sandboxes():
            if not self.places.is_place(row.name) or row.status in ("absent", "hibernated"):
                continue
            try:
                if row.status in ("bound", "paused"):
                    self.hibernation.hibernate(row.name, by="shutdown")
                elif row.status == "creating":
                    self.places.discard(row.name, "the runtime stopped while it was created")
                else:
                    self.places.retire(row.name, detail="retired when the runtime stopped")
            except Exception as error:  # noqa: BLE001 -- each one on its own; the rest still go
                log.warning("shutdown: on-demand sandbox %s: %s; removing it", row.name, error)
                self.places.discard(row.name, f"removed when the runtime stopped ({type(error).__name__}); its "
                                              "session has ended")

    # What the tests and the command line call directly

    def sandbox(self, name: str) -> SandboxRow:
        return self.sandboxes.get(name)

    # The configuration in force, swapped without a restart (sandstack.runtime.reload)

    def check_config(self, config: RuntimeConfig) -> None:
        """Refused (a ValueError) when `config` is not one this process can take in place: another host's, or
        another address or port to serve on (those need a new process: the plan renews the container for them)."""
        now = self.live.config
        if config.host != now.host:
            raise Refused(f"it is host {config.host!r}'s configuration, not host {now.host!r}'s")
        served = ("listen", "port", "ssh_port")
        moved = [f"{field} {getattr(now, field)!r} -> {getattr(config, field)!r}" for field in served
                 if getattr(now, field) != getattr(config, field)]
        if moved:
            raise NeedsRestart(f"the runtime serves on what it started with ({'; '.join(moved)}): a restart applies "
                               "it")

    def reconfigure(self, config: RuntimeConfig, digest: str | None) -> None:
        """`config` in force from now on, without a restart: a new pool is claimable at once; a changed ceiling,
        idle policy, retention, limit or site is read at its next use (every part reads the configuration in force
        at each use: sandstack.runtime.config); open sessions, processes, streams and terminals go on. A pool it no
        longer declares takes no new claim (404); its bound sessions go on, on its last settings (it is *retired*),
        until each is released or ends (the stack deleting their containers ends them with that cause), and its idle
        sandboxes are forgotten."""
        self.check_config(config)
        with self.store.exclusive():  # no claim binds meanwhile: `held` is every sandbox a session holds
            held = {row.name: row.pool for row in self.store.sandboxes() if row.session is not None}
            self.live.swap(config, digest, held)
            self._sync_rows()
        kept = sorted(set(self.live.retired()) | set(self.live.retired_places()))
        log.info("configuration %s in force: pools %s%s", digest, ", ".join(sorted(config.pools)) or "none",
                 f"; kept while sessions hold them: {', '.join(kept)}" if kept else "")

    def forget_retired(self) -> None:
        """A retired pool whose last session ended is forgotten, with its sandboxes' rows; so is a retired place."""
        retired, places = self.live.retired(), self.live.retired_places()
        if not retired and not places:
            return
        with self.store.exclusive():
            rows = self.store.sandboxes()
            holding = {row.pool for row in rows if row.session is not None}
            bound = {row.name for row in rows if row.session is not None}
            for pool in retired:
                if pool not in holding:
                    self.live.forget(pool)
            for name in places:
                if name not in bound:
                    self.live.forget_place(name)
            self._sync_rows()

    def _sync_rows(self) -> None:
        declared = {pool: spec.places for pool, spec in self.live.config.pools.items()}
        for pool in self.live.retired():  # only the sandboxes still bound: the others are gone with the pool
            declared[pool] = tuple(row.name for row in self.store.sandboxes(pool) if row.session is not None)
        for name, (pool, _) in self.live.retired_places().items():
            declared[pool] = (*declared.get(pool, ()), name)
        self.store.sync_declared(declared)

    def claim(self, pool: str, session: str, from_snapshot: str | None = None,
              size: str | None = None) -> tuple[SandboxRow, bool]:
        """A claim of session id `session` as the host's token makes it."""
        return self.sessions.claim(pool, key(OPERATOR, session), from_snapshot, size)

    def release(self, session: str) -> SandboxRow:
        """The release of the host's session `session`."""
        return self.sessions.release(key(OPERATOR, session))

    def monitor_once(self, now: float | None = None) -> None:
        self.monitor.once(now)
        self.forget_retired()

    def live_markers(self) -> list[str]:
        return self.execs.markers()
