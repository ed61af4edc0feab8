"""A snapshot store in memory with the registry store's layout and checks (sandstack.runtime.snapstore): a manifest
per (pool, id) naming its row's blob and its tars' blobs by digest. `down` makes every call fail as an unreachable
registry does; `tamper` changes what it serves, as someone with write access to the store could."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

from sandstack.runtime.snapstore import TITLE, StoreDown, Stored, copy_checked, part_names, row_json, stored_of
from sandstack.runtime.store import SnapshotRow

DOWN = "snapshot store http://store.test did not answer (ConnectionRefusedError: [Errno 111] Connection refused)"


def digest_of(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


class FakeStore:
    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[tuple[str, str], tuple[bytes, list[dict]]] = {}
        self.down = False
        self.pulls = 0

    def _up(self) -> None:
        if self.down:
            raise StoreDown(DOWN)

    def push(self, row: SnapshotRow, host: str, folder: Path) -> None:
        self._up()
        layers = []
        for name in part_names(row.paths):
            data = (folder / name).read_bytes()
            self.blobs[digest_of(data)] = data
            layers.append({"digest": digest_of(data), "size": len(data), "annotations": {TITLE: name}})
        self.manifests[(row.pool, row.id)] = (row_json(row, host), layers)

    def find(self, pool: str, snapshot_id: str) -> Stored | None:
        self._up()
        found = self.manifests.get((pool, snapshot_id))
        return stored_of(pool, snapshot_id, *found) if found else None

    def pull(self, stored: Stored, folder: Path) -> None:
        self._up()
        self.pulls += 1
        for part in stored.parts:
            with open(folder / part.name, "wb") as out:
                copy_checked(io.BytesIO(self.blobs[part.digest]), out, part, stored.row.id)

    def delete(self, pool: str, snapshot_id: str) -> None:
        self._up()
        self.manifests.pop((pool, snapshot_id), None)

    def tamper(self, pool: str, snapshot_id: str, name: str, data: bytes, *, renamed: bool = True) -> None:
        """Tar `name` of the snapshot served as `data`: `renamed` under its own digest and size (the manifest
        rewritten to match, as a writer of the store could), else in place of the old bytes (a digest mismatch)."""
        config, layers = self.manifests[(pool, snapshot_id)]
        layer = next(layer for layer in layers if layer["annotations"][TITLE] == name)
        if not renamed:
            self.blobs[layer["digest"]] = data
            return
        self.blobs[digest_of(data)] = data
        size_change = len(data) - layer["size"]
        layer["digest"], layer["size"] = digest_of(data), len(data)
        row = json.loads(config)
        row["size"] += size_change
        self.manifests[(pool, snapshot_id)] = (json.dumps(row, sort_keys=True).encode(), layers)
