"""The snapshot store every host of a pool reads (docs/design/snapshot-store.md): a registry of the Docker Registry
HTTP API V2 (Debian's `docker-registry`, or any that speaks it with HTTP basic authentication).

Each snapshot is one OCI manifest in repository `<repository>/<pool>`, tagged by the snapshot's id: its config blob
is the snapshot's row as JSON (pool, session, sandbox, size, paths, host, time), its layers are the snapshot's tars
(`0.tar`, ... and `root.tar`), each named by its `org.opencontainers.image.title`. A host that takes a snapshot
pushes it before it answers; a host that does not have a snapshot finds it here by id, reads its row (so the same
scope checks run on it: a session's token reaches only its session's), and downloads its tars into a folder of its
own, each checked against its digest and size as it comes. What the tars hold is checked afterwards exactly as a
local snapshot's is (sandstack.runtime.tarcheck): the store is not trusted more than an upload.

The credentials are the runtime's secrets: sent only in the Authorization header (never on a redirect), and never
in a message, which names the registry's address only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Mapping, Protocol

from sandstack.plan.runtime import ENV_STORE_CA, ENV_STORE_PASSWORD, SnapshotStore as StoreConfig
from sandstack.runtime.config import Live
from sandstack.runtime.errors import ApiError
from sandstack.runtime.rootsnap import ROOT_TAR, parts
from sandstack.runtime.store import SnapshotRow

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.sandstack.snapshot.v1+json"
LAYER_TYPE = "application/vnd.sandstack.snapshot.tar.v1"
TITLE = "org.opencontainers.image.title"
TIMEOUT = 60  # seconds a connect or one read may take: a registry that stalls longer is down
CONFIG_MAX = 64 * 1024  # a snapshot's row as JSON is a few hundred bytes
MANIFEST_MAX = 64 * 1024
CHUNK = 1 << 20


class StoreDown(Exception):
    """The store did not answer, or not as a registry does (a 5xx, a refused login): nothing was changed."""


class StoreForged(Exception):
    """What the store served is not what a runtime pushed (a digest, a size, a row that does not match)."""


@dataclass(frozen=True)
class Part:
    name: str  # '0.tar', ..., 'root.tar'
    digest: str
    size: int


@dataclass(frozen=True)
class Stored:
    """A snapshot found in the store: its row as the host that took it wrote it, and its tars."""

    row: SnapshotRow
    host: str
    parts: tuple[Part, ...]


class SnapshotStore(Protocol):
    def push(self, row: SnapshotRow, host: str, folder: Path) -> None:
        """The snapshot `row` whose tars are in `folder`, kept for every host of its pool."""

    def find(self, pool: str, snapshot_id: str) -> Stored | None:
        """The snapshot of `pool` by id; None when the store does not have it."""

    def pull(self, stored: Stored, folder: Path) -> None:
        """Its tars into `folder`, each checked against its digest and size (StoreForged)."""

    def delete(self, pool: str, snapshot_id: str) -> None:
        """Gone from the store (already gone: nothing to do)."""


def part_names(paths: str) -> list[str]:
    """The tars a snapshot of these paths holds, in the order a snapshot writes them."""
    writable, root = parts(paths)
    return [f"{i}.tar" for i in range(len(writable))] + ([ROOT_TAR] if root else [])


def row_json(row: SnapshotRow, host: str) -> bytes:
    return json.dumps({"id": row.id, "pool": row.pool, "sandbox": row.sandbox, "session": row.session,
                       "created_at": row.created_at, "size": row.size, "paths": row.paths, "host": host},
                      sort_keys=True).encode()


def stored_of(pool: str, snapshot_id: str, config: bytes, layers: list[dict]) -> Stored:
    """The snapshot a manifest describes, or StoreForged naming what does not fit (it was not pushed as such)."""
    def forged(why: str) -> StoreForged:
        return StoreForged(f"snapshot {snapshot_id!r} in the store is not one a runtime kept: {why}")
    try:
        data = json.loads(config)
        row = SnapshotRow(str(data["id"]), str(data["pool"]), str(data["sandbox"]),
                          None if data["session"] is None else str(data["session"]), float(data["created_at"]),
                          int(data["size"]), str(data["paths"]))
        host = str(data["host"])
        found = tuple(Part(str(layer["annotations"][TITLE]), str(layer["digest"]), int(layer["size"]))
                      for layer in layers)
    except (ValueError, KeyError, TypeError) as error:
        raise forged(f"its row or layers cannot be read ({type(error).__name__})") from error
    if (row.id, row.pool) != (snapshot_id, pool):
        raise forged(f"its row names snapshot {row.id!r} of pool {row.pool!r}")
    if [p.name for p in found] != part_names(row.paths):
        raise forged(f"it holds {[p.name for p in found]}, not the tars of paths {row.paths.split(chr(10))}")
    if any(p.size < 0 or not re.fullmatch(r"sha256:[0-9a-f]{64}", p.digest) for p in found):
        raise forged("a layer's size or digest is not one")
    if sum(p.size for p in found) != row.size:
        raise forged(f"its tars take {sum(p.size for p in found)} bytes, its row says {row.size}")
    return Stored(row, host, found)


class RegistryStore:
    """The store over a registry's HTTP API (module text). `password`, `ca`: the runtime's secrets."""

    def __init__(self, config: StoreConfig, password: str, ca: str | None = None):
        self.config, self.url = config, config.registry.rstrip("/")
        basic = base64.b64encode(f"{config.username}:{password}".encode()).decode()
        self._auth = f"Basic {basic}"
        context = ssl.create_default_context(cadata=ca) if ca else None
        self._opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))

    def repository(self, pool: str) -> str:
        return f"{self.config.repository}/{pool}"

    # HTTP

    def _call(self, method: str, path: str, *, body: bytes | IO[bytes] | None = None,
              headers: dict[str, str] | None = None, ok: tuple[int, ...] = (200,)):
        """The open response of an answer in `ok` (404 too when listed), else StoreDown naming the address only."""
        url = path if path.startswith(("http://", "https://")) else f"{self.url}{path}"
        if not url.startswith(self.url + "/"):  # a Location elsewhere: the credentials go to this registry only
            raise StoreDown(f"snapshot store {self.url} sent the runtime elsewhere ({method} {path.split('?')[0]})")
        request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
        request.add_unredirected_header("Authorization", self._auth)
        try:
            response = self._opener.open(request, timeout=TIMEOUT)
        except urllib.error.HTTPError as error:
            if error.code in ok:
                return error
            error.close()
            why = {401: "refused the runtime's credentials (401)", 403: "refused the runtime's credentials (403)",
                   405: "does not allow this (405: deletes need storage.delete.enabled)"}.get(
                       error.code, f"answered {error.code}")
            raise StoreDown(f"snapshot store {self.url} {why} to {method} {path.split('?')[0]}") from None
        except (OSError, ValueError) as error:  # URLError, timeouts, resets
            reason = getattr(error, "reason", error)
            raise StoreDown(f"snapshot store {self.url} did not answer ({type(reason).__name__}: {reason})") from None
        if response.status not in ok:
            response.close()
            raise StoreDown(f"snapshot store {self.url} answered {response.status} to {method} {path.split('?')[0]}")
        return response

    def _has_blob(self, repo: str, digest: str) -> bool:
        with self._call("HEAD", f"/v2/{repo}/blobs/{digest}", ok=(200, 404)) as response:
            return response.status == 200

    def _put_blob(self, repo: str, digest: str, size: int, body: bytes | IO[bytes]) -> None:
        if self._has_blob(repo, digest):  # the same bytes kept before (an unchanged path): not sent again
            return
        with self._call("POST", f"/v2/{repo}/blobs/uploads/", ok=(202,)) as started:
            location = started.headers.get("Location", "")
        if location.startswith("/"):
            location = f"{self.url}{location}"
        joined = f"{location}{'&' if '?' in location else '?'}digest={digest}"
        with self._call("PUT", joined, body=body, ok=(201,),
                        headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)}):
            pass

    # The store

    def push(self, row: SnapshotRow, host: str, folder: Path) -> None:
        repo = self.repository(row.pool)
        layers = []
        for name in part_names(row.paths):
            path = folder / name
            digest, size = _digest(path)
            with open(path, "rb") as body:
                self._put_blob(repo, digest, size, body)
            layers.append({"mediaType": LAYER_TYPE, "digest": digest, "size": size, "annotations": {TITLE: name}})
        config = row_json(row, host)
        config_digest = f"sha256:{hashlib.sha256(config).hexdigest()}"
        self._put_blob(repo, config_digest, len(config), config)
        manifest = json.dumps({"schemaVersion": 2, "mediaType": MANIFEST_TYPE,
                               "config": {"mediaType": CONFIG_TYPE, "digest": config_digest, "size": len(config)},
                               "layers": layers}).encode()
        with self._call("PUT", f"/v2/{repo}/manifests/{row.id}", body=manifest, ok=(201,),
                        headers={"Content-Type": MANIFEST_TYPE}):
            pass

    def find(self, pool: str, snapshot_id: str) -> Stored | None:
        repo = self.repository(pool)
        with self._call("GET", f"/v2/{repo}/manifests/{snapshot_id}", headers={"Accept": MANIFEST_TYPE},
                        ok=(200, 404)) as response:
            if response.status == 404:
                return None
            raw = response.read(MANIFEST_MAX + 1)
        try:
            manifest = json.loads(raw)
            config, layers = manifest["config"], manifest["layers"]
            config_digest, config_size = str(config["digest"]), int(config["size"])
        except (ValueError, KeyError, TypeError) as error:
            raise StoreForged(f"snapshot {snapshot_id!r} in the store is not one a runtime kept: its manifest cannot "
                              f"be read ({type(error).__name__})") from error
        if len(raw) > MANIFEST_MAX or not 0 <= config_size <= CONFIG_MAX or not isinstance(layers, list):
            raise StoreForged(f"snapshot {snapshot_id!r} in the store is not one a runtime kept: its manifest is "
                              "larger than one")
        with self._call("GET", f"/v2/{repo}/blobs/{config_digest}") as response:
            data = response.read(CONFIG_MAX + 1)
        if len(data) != config_size or f"sha256:{hashlib.sha256(data).hexdigest()}" != config_digest:
            raise StoreForged(f"snapshot {snapshot_id!r} in the store is not one a runtime kept: its row's bytes are "
                              "not those its manifest names")
        return stored_of(pool, snapshot_id, data, layers)

    def pull(self, stored: Stored, folder: Path) -> None:
        repo = self.repository(stored.row.pool)
        for part in stored.parts:
            with self._call("GET", f"/v2/{repo}/blobs/{part.digest}") as response, \
                    open(folder / part.name, "wb") as out:
                copy_checked(response, out, part, stored.row.id)

    def delete(self, pool: str, snapshot_id: str) -> None:
        repo = self.repository(pool)
        with self._call("HEAD", f"/v2/{repo}/manifests/{snapshot_id}", headers={"Accept": MANIFEST_TYPE},
                        ok=(200, 404)) as response:
            if response.status == 404:
                return
            digest = response.headers.get("Docker-Content-Digest", "")
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            raise StoreDown(f"snapshot store {self.url} named no digest for snapshot {snapshot_id!r}")
        with self._call("DELETE", f"/v2/{repo}/manifests/{digest}", ok=(202, 404)):
            pass


def copy_checked(source: IO[bytes], out: IO[bytes], part: Part, snapshot_id: str) -> None:
    """`part`'s bytes from `source` to `out`: no more than its size, and its digest; else StoreForged."""
    digest, got = hashlib.sha256(), 0
    while True:
        chunk = source.read(min(CHUNK, part.size - got + 1))
        if not chunk:
            break
        got += len(chunk)
        if got > part.size:
            break
        digest.update(chunk)
        out.write(chunk)
    if got != part.size or f"sha256:{digest.hexdigest()}" != part.digest:
        raise StoreForged(f"snapshot {snapshot_id!r} in the store is not one a runtime kept: its {part.name} is not "
                          f"the {part.size} bytes of digest {part.digest}")


def _digest(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return f"sha256:{digest.hexdigest()}", size


class Stores:
    """The store of the configuration in force (None: none declared), its secrets read from the environment.
    `fixed`: a store to use whatever the configuration names (the tests' fake one)."""

    def __init__(self, live: Live, environ: Mapping[str, str], fixed: SnapshotStore | None = None):
        self.live, self.environ, self.fixed = live, environ, fixed
        self._made: tuple[StoreConfig, RegistryStore] | None = None

    def current(self) -> SnapshotStore | None:
        config = self.live.config.snapshot_store
        if config is None:
            return None
        if self.fixed is not None:
            return self.fixed
        if self._made is None or self._made[0] != config:
            try:
                self._made = (config, registry_store(config, self.environ))
            except ValueError as error:  # declared by a reload, its secret not given: the container needs renewing
                raise StoreDown(str(error)) from None
        return self._made[1]


def registry_store(config: StoreConfig, environ: Mapping[str, str]) -> RegistryStore:
    """The registry store of `config`, its password (and CA) from the environment; ValueError names the variable,
    never a value, when one is missing."""
    password = environ.get(ENV_STORE_PASSWORD, "")
    if not password:
        raise ValueError(f"{ENV_STORE_PASSWORD} must hold the snapshot store's password "
                         "(runtime.snapshot_store.password's secret)")
    ca = environ.get(ENV_STORE_CA, "") if config.ca else None
    if config.ca and not ca:
        raise ValueError(f"{ENV_STORE_CA} must hold the snapshot store's CA (runtime.snapshot_store.ca's secret)")
    return RegistryStore(config, password, ca)


def answer(error: StoreDown | StoreForged, doing: str, **fields: object) -> ApiError:
    """The API's answer: the store down is 503 (nothing changed), a forged snapshot 502 (nothing of it used)."""
    if isinstance(error, StoreDown):
        return ApiError(503, f"{doing}: {error}; nothing was changed", **fields)
    return ApiError(502, f"{doing}: {error}; nothing of it was used", **fields)
