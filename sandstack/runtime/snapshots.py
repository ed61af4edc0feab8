"""Snapshots of a bound sandbox's writable paths: a tar of each, stored under the runtime's state dir, counted
against the pool's snapshot_storage (sandstack.runtime.storage), restored through the same tar check as an upload; a
writable root's changes too (sandstack.runtime.rootsnap). The bytes move as every transfer's do
(sandstack.runtime.transfer), run as the sandbox's own user.

With a snapshot store (sandstack.runtime.snapstore) each snapshot is also kept there before the answer, so every
host of its pool finds it by id: a snapshot this host does not have is read from the store (its row first, for the
scope checks; its tars, downloaded within the pool's storage room, only to restore them, then dropped)."""

from __future__ import annotations

import re
import logging
import shutil
import tarfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sandstack.plan.runtime import SNAPSHOT_DIR
from sandstack.runtime import rootsnap, scripts
from sandstack.runtime.config import Live
from sandstack.runtime.errors import ApiError, conflict
from sandstack.runtime.interfaces import Access, Leases, RootSnapshots, Sandboxes, Storage, Transfers
from sandstack.runtime.leases import holding
from sandstack.runtime.models import SNAPSHOT_PATTERN
from sandstack.runtime.retention import per_session
from sandstack.runtime.snapstore import Stored, StoreDown, StoreForged, Stores, answer
from sandstack.runtime.store import SnapshotRow, Store
from sandstack.runtime.tarcheck import Checked, Forged, PastBound, TooDeep, write_tar

SNAPSHOT_ID = re.compile(SNAPSHOT_PATTERN.removeprefix("^").removesuffix("$"))
FETCHED_DIR = "fetched"  # under the state dir: a store's snapshot's tars while they are restored
log = logging.getLogger("sandstack.runtime")


class Snapshots:
    def __init__(self, live: Live, sandboxes: Sandboxes, access: Access, transfers: Transfers, storage: Storage,
                 store: Store, root: RootSnapshots, leases: Leases, state_dir: Path, stores: Stores):
        self.live, self.sandboxes, self.access, self.transfers = live, sandboxes, access, transfers
        self.storage, self.store, self.root, self.leases, self.stores = storage, store, root, leases, stores
        self.dir = state_dir / SNAPSHOT_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        self.fetched = state_dir / FETCHED_DIR
        shutil.rmtree(self.fetched, ignore_errors=True)  # a restore a stop cut short left its download
        self.fetched.mkdir(parents=True, exist_ok=True)

    def row(self, snapshot_id: str, pool: str | None = None) -> SnapshotRow:
        """The snapshot (of `pool`: 409 for another pool's); 404 naming it when it is neither on this host nor in
        the snapshot store."""
        return self._locate(snapshot_id, pool)[0]

    def find(self, snapshot_id: str, pool: str | None = None) -> SnapshotRow | None:
        """The snapshot on this host (of any pool), else in the store (of `pool`, else of any pool of this host);
        None when neither has it. For the scope checks, which answer 404 for what a token may not see. The store
        down: 503."""
        try:
            return self._locate(snapshot_id, pool, same_pool=False)[0]
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def _locate(self, snapshot_id: str, pool: str | None,
                same_pool: bool = True) -> tuple[SnapshotRow, Stored | None]:
        """(its row, and where the store has it when this host does not)."""
        valid = SNAPSHOT_ID.fullmatch(snapshot_id) is not None
        row = self.store.snapshot(snapshot_id) if valid else None
        stored = None
        if row is None and valid:
            stored = self._from_store(snapshot_id, pool)
            row = stored.row if stored is not None else None
        if row is None:
            host = self.sandboxes.host
            raise ApiError(404, f"snapshot {snapshot_id!r} is not on host {host!r}", snapshot=snapshot_id, host=host)
        if same_pool and pool is not None and row.pool != pool:
            raise conflict(f"snapshot {snapshot_id!r} is of pool {row.pool!r}, not {pool!r}",
                           snapshot=snapshot_id, pool=row.pool)
        return row, stored

    def _from_store(self, snapshot_id: str, pool: str | None) -> Stored | None:
        try:
            store = self.stores.current()
            if store is None:
                return None
            for name in [pool] if pool is not None else sorted(self.live.config.pools):
                found = store.find(name, snapshot_id)
                if found is not None:
                    return found
        except (StoreDown, StoreForged) as error:
            raise answer(error, f"reading snapshot {snapshot_id!r} from the snapshot store",
                         snapshot=snapshot_id) from None
        return None

    @holding  # no pause while it runs
    def take(self, name: str) -> SnapshotRow:
        sandbox = self.access.usable(name)
        spec = self.sandboxes.pool(sandbox.pool)
        if not spec.writable and not spec.writable_root:
            raise conflict(f"pool {sandbox.pool!r} has no writable paths to snapshot", pool=sandbox.pool)
        snapshot_id = f"snap-{uuid.uuid4().hex}"
        target = self.dir / snapshot_id
        # Within what is left of the pool's snapshot_storage and the session's share (sandstack.runtime.storage).
        with self.storage.room(sandbox.pool, sandbox.session) as room:
            bound = left = room.bound
            try:
                target.mkdir()
                for index, writable in enumerate(spec.writable):
                    stored = target / f"{index}.tar"
                    with open(stored, "wb") as out:
                        # Sparse files stay sparse: their holes take no room (tarcheck).
                        self.transfers.relay(name, writable.path, left, lambda entries: write_tar(entries, out),
                                             "snapshotting", skip=writable.keep, sparse=True)
                    left -= stored.stat().st_size
                    if left < 0:
                        raise PastBound(bound)
                if spec.writable_root:  # the root's changes too (sandstack.runtime.rootsnap), within what is left
                    stored = target / rootsnap.ROOT_TAR
                    with open(stored, "wb") as out:
                        self.root.read(name, left, out)
                    if stored.stat().st_size > left:
                        raise PastBound(bound)
            except PastBound as error:
                shutil.rmtree(target, ignore_errors=True)
                raise room.past(f"the snapshot of sandbox {name!r}", error, sandbox=name) from error
            except OSError as error:
                shutil.rmtree(target, ignore_errors=True)
                raise self.transfers.storage_error(error, f"snapshotting sandbox {name!r}") from error
            except BaseException:
                shutil.rmtree(target, ignore_errors=True)
                raise
            size = sum(f.stat().st_size for f in target.iterdir())
            paths = [w.path for w in spec.writable] + ([rootsnap.ROOT_PART] if spec.writable_root else [])
            row = SnapshotRow(snapshot_id, sandbox.pool, name, sandbox.session, time.time(), size, "\n".join(paths))
            self._keep(row, target)
            self.store.add_snapshot(row)  # counted from here on: the room is let go after
        self.apply_retention(time.time())
        return row

    def _keep(self, row: SnapshotRow, folder: Path) -> None:
        """The snapshot in the store too, before it is answered; the store down: 503 and nothing kept."""
        try:
            store = self.stores.current()
            if store is not None:
                store.push(row, self.sandboxes.host, folder)
        except (StoreDown, StoreForged) as error:
            shutil.rmtree(folder, ignore_errors=True)
            raise answer(error, f"keeping the snapshot of sandbox {row.sandbox!r} in the snapshot store",
                         sandbox=row.sandbox) from None

    @contextmanager
    def _tars(self, snap: SnapshotRow, stored: Stored | None, session: str | None) -> Iterator[Path]:
        """The folder of the snapshot's tars: this host's, or the store's downloaded within the room the pool's
        snapshot_storage and the session's share leave (dropped after: it is not a snapshot of this host)."""
        if stored is None:
            yield self.dir / snap.id
            return
        with self.storage.room(snap.pool, session) as room:
            if snap.size > room.bound:
                raise room.past(f"snapshot {snap.id!r} from the snapshot store ({snap.size} bytes)",
                                PastBound(room.bound), snapshot=snap.id)
            folder = self.fetched / uuid.uuid4().hex
            try:
                try:
                    folder.mkdir()
                    self.stores.current().pull(stored, folder)  # type: ignore[union-attr]
                except (StoreDown, StoreForged) as error:
                    raise answer(error, f"reading snapshot {snap.id!r} from the snapshot store",
                                 snapshot=snap.id) from None
                except OSError as error:
                    raise self.transfers.storage_error(error, f"reading snapshot {snap.id!r} from the snapshot "
                                                              "store") from error
                yield folder
            finally:
                shutil.rmtree(folder, ignore_errors=True)

    def restore(self, name: str, snapshot_id: str, *, claiming: bool = False) -> SnapshotRow:
        """A writable root first, the container stopped and started (sandstack.runtime.rootsnap; `claiming`: a
        claim's, which resets the sandbox itself on a failure), then the writable paths. A snapshot of the store is
        downloaded (and its digests checked) before anything of the sandbox changes."""
        sandbox = self.access.usable(name)
        snap, stored = self._locate(snapshot_id, sandbox.pool)
        paths, has_root = rootsnap.parts(snap.paths)
        spec = self.sandboxes.pool(sandbox.pool)
        declared = [w.path for w in spec.writable]
        if paths != declared:
            raise conflict(f"snapshot {snapshot_id!r} holds writable paths {paths}, but pool {sandbox.pool!r} now "
                           f"has {declared}", snapshot=snapshot_id)
        if has_root and not spec.writable_root:
            raise conflict(f"snapshot {snapshot_id!r} holds a writable root, but pool {sandbox.pool!r} now has a "
                           "read-only one", snapshot=snapshot_id)
        with self._tars(snap, stored, sandbox.session) as folder:
            if spec.writable_root:
                self.root.restore(name, snapshot_id, folder / rootsnap.ROOT_TAR if has_root else None,
                                  claiming=claiming)
            return self._restore_paths(name, snap, folder)

    @holding  # no pause while it runs
    def _restore_paths(self, name: str, snap: SnapshotRow, folder: Path) -> SnapshotRow:
        snapshot_id = snap.id
        sandbox = self.sandboxes.get(name)
        for index, writable in enumerate(self.sandboxes.pool(sandbox.pool).writable):
            path = writable.path
            # Only what passes the check goes back (a snapshot stored before the check existed included).
            with open(folder / f"{index}.tar", "rb") as stored, self.transfers.spool() as tar:
                try:
                    with tarfile.open(fileobj=stored, mode="r|") as entries:
                        write_tar(Checked(entries, snap.size, sparse=True), tar)
                except (Forged, TooDeep, tarfile.TarError) as error:
                    raise conflict(f"snapshot {snapshot_id!r} cannot be restored: its tar of {path!r} is not a "
                                   f"workspace's ({error})", snapshot=snapshot_id) from error
                tar.seek(0)
                code, stderr = self.transfers.run(name, scripts.sh(scripts.RESTORE, *writable.keep), path, stdin=tar)
            if code != 0:
                raise self.transfers.fail(code, stderr, path, name, "restoring")
        return snap

    def delete(self, snapshot_id: str) -> None:
        """Gone from the store first (the store down: 503, nothing deleted), then from this host."""
        snap = self.row(snapshot_id)
        try:
            store = self.stores.current()
            if store is not None:
                store.delete(snap.pool, snapshot_id)
        except StoreDown as error:
            raise answer(error, f"deleting snapshot {snapshot_id!r} from the snapshot store",
                         snapshot=snapshot_id) from None
        self.store.delete_snapshot(snapshot_id)
        shutil.rmtree(self.dir / snapshot_id, ignore_errors=True)

    def _retire(self, snapshot_id: str) -> bool:
        """Retention's delete: one the store cannot delete now stays (here and there) for the next pass."""
        try:
            self.delete(snapshot_id)
        except ApiError as error:
            log.warning("retention: snapshot %s kept for now: %s", snapshot_id, error.message)
            return False
        return True

    def apply_retention(self, now: float) -> list[str]:
        """Deletes each session's snapshots beyond its own bound (sandstack.runtime.retention), then each pool's
        beyond its count or older than its max age; returns their ids."""
        removed = per_session(self.live.config, self.store, now, self._retire)
        for pool, spec in self.live.config.pools.items():
            for index, snap in enumerate(self.store.snapshots(pool=pool)):
                too_many = index >= spec.retention.count
                too_old = now - snap.created_at > spec.retention.max_age_seconds
                if (too_many or too_old) and self._retire(snap.id):
                    removed.append(snap.id)
        return removed
