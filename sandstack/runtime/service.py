"""The runtime's parts, made once and joined: each owns its state and reaches the others only through their typed
public methods (docs/design/runtime.md has the map). Nothing here but the wiring, the runtime's stop, and the few
calls the tests and the command line make directly.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import cast

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
from sandstack.runtime.processes import Processes
from sandstack.runtime.readiness import Readiness
from sandstack.runtime.rootsnap import RootSnapshots
from sandstack.runtime.sandboxes import Sandboxes
from sandstack.runtime.session_keys import key
from sandstack.runtime.session_tokens import SessionTokens
from sandstack.runtime.sessions import Sessions
from sandstack.runtime.snapshots import Snapshots
from sandstack.runtime.storage import Copies, Storage
from sandstack.runtime.store import SandboxRow, Store
from sandstack.runtime.tokens import OPERATOR
from sandstack.runtime.transfer import Transfers

log = logging.getLogger("sandstack.runtime")
ENDED = "its session ended: the sandbox was reset, which stopped it"


class Runtime:
    def __init__(self, config: RuntimeConfig, backend: SandboxBackend, state_dir: Path):
        self.backend, self.state_dir = backend, state_dir
        self.live = Live(config)
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
                                   root, self.leases, state_dir)
        self.claims = WarmClaims(self.sandboxes)
        self.session_tokens = SessionTokens(self.store)
        self.sessions = Sessions(self.live, self.sandboxes, self.claims, self.places, self.snapshots,
                                 self.hibernation, self.credentials, self.execs, self.session_tokens)
        self.monitor = Monitor(self.live, self.sandboxes, self.places, self.hibernation, self.snapshots,
                               self.session_tokens)
        # What a session holds besides the container ends with it: its processes, its run-scoped secrets.
        self.sandboxes.on_session_end(lambda name: self.processes.end_session(name, ENDED))
        self.sandboxes.on_session_end(self.credentials.drop)  # whatever the reset's outcome
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

    def claim(self, pool: str, session: str, from_snapshot: str | None = None) -> tuple[SandboxRow, bool]:
        """A claim of session id `session` as the host's token makes it."""
        return self.sessions.claim(pool, key(OPERATOR, session), from_snapshot)

    def release(self, session: str) -> SandboxRow:
        """The release of the host's session `session`."""
        return self.sessions.release(key(OPERATOR, session))

    def monitor_once(self, now: float | None = None) -> None:
        self.monitor.once(now)

    def live_markers(self) -> list[str]:
        return self.execs.markers()
