"""What a host's sandbox runtime is told, as plain values: the pools on its host, their sandboxes, where each
sandbox's workspace is and what its writable paths are, and the runtime's policies (idle, snapshot retention,
upload, download, output and snapshot storage limits).

The deploy code builds one `RuntimeConfig` per host from the resolved spec and writes `to_json()` into the
runtime's container; the runtime reads it back with `from_json()` from the file named by `ENV_CONFIG`. Pure
values: no Pulumi, no Docker, so both sides and their tests share this one definition.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath
from typing import Any, Literal

from sandstack.plan.recipe import OnDemand, ondemand_of
from sandstack.spec.contract import REGISTRY_URL_PATTERN, REPOSITORY_PATTERN, SSH_PER_SOURCE

FORMAT_VERSION = 1

# The runtime's process contract: where it finds its configuration, token and state.
ENV_CONFIG = "SANDSTACK_RUNTIME_CONFIG"  # path of the JSON written by RuntimeConfig.to_json()
# The same JSON as text: the container's environment variable (written to ENV_CONFIG's file at start), and the
# name of the runtime's item in a configuration set (sandstack.runtime.reload).
ENV_CONFIG_TEXT = "SANDSTACK_RUNTIME_CONFIG_TEXT"
# The runtime's configuration volume (sandstack.spec.contract CONFIG_DIR), where its reload container delivers sets.
ENV_CONFIG_DIR = "SANDSTACK_CONFIG_DIR"
ENV_TOKEN = "SANDSTACK_RUNTIME_TOKEN"  # the bearer token every request must carry (a Pulumi secret)
# The SSH endpoint's host key (a Pulumi secret: an OpenSSH or PEM private key), when the runtime declares `ssh`.
ENV_SSH_HOST_KEY = "SANDSTACK_RUNTIME_SSH_HOST_KEY"
# The ingress's own token (sandstack.runtime.routes.wake): it may wake a site's sandbox and do nothing else.
ENV_WAKE_TOKEN = "SANDSTACK_RUNTIME_WAKE_TOKEN"
# The snapshot store's password and its CA (Pulumi secrets), when the runtime declares `snapshot_store`
# (docs/design/snapshot-store.md).
ENV_STORE_PASSWORD = "SANDSTACK_RUNTIME_STORE_PASSWORD"
ENV_STORE_CA = "SANDSTACK_RUNTIME_STORE_CA"
ENV_STATE_DIR = "SANDSTACK_RUNTIME_STATE"  # SQLite, snapshots and the audit log; a host volume
DEFAULT_STATE_DIR = "/var/lib/sandstack-runtime"
DEFAULT_PORT = 7480
DB_FILE = "runtime.sqlite3"
SNAPSHOT_DIR = "snapshots"
AUDIT_FILE = "audit.log"

IdleAction = Literal["pause", "stop", "reset", "hibernate"]
# tmpfs: emptied by the container's restart; disk: a workspace volume, emptied (and re-seeded) by the runtime.
WritableKind = Literal["tmpfs", "disk"]
IDLE_ACTIONS: tuple[str, ...] = ("pause", "stop", "reset", "hibernate")
WRITABLE_KINDS: tuple[str, ...] = ("tmpfs", "disk")


def _abs_path(value: str, what: str) -> str:
    path = PurePosixPath(value)
    if not path.is_absolute() or ".." in path.parts or str(path) != value or value == "/":
        raise ValueError(f"{what}: {value!r} must be a normalised absolute path other than '/'")
    return value


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what}: {value!r} must be an integer >= 1")
    return value


@dataclass(frozen=True)
class WritablePath:
    path: str
    kind: WritableKind = "tmpfs"
    seed: bool = False  # disk only: a reset fills it again with what the sandbox's image has at `path`

    def __post_init__(self) -> None:
        _abs_path(self.path, "writable.path")
        if self.kind not in WRITABLE_KINDS:
            raise ValueError(f"writable.kind: {self.kind!r} is not one of {', '.join(WRITABLE_KINDS)}")
        if self.seed and self.kind != "disk":
            raise ValueError(f"writable.seed: {self.path!r} is a {self.kind}; only a disk workspace is seeded")

    @property
    def keep(self) -> tuple[str, ...]:
        """What the filesystem itself owns at the top of the path: never archived, emptied or replaced. An
        unseeded disk workspace keeps ext4's root-owned `lost+found` (a seeded one is made without it)."""
        return ("lost+found",) if self.kind == "disk" and not self.seed else ()


@dataclass(frozen=True)
class IdlePolicy:
    """After `after_seconds` without API activity and with the sandbox's CPU under the idle threshold:
    'pause' freezes it (the next exec resumes it), 'stop' ends the session and stops the container (the next
    claim starts it fresh), 'reset' ends the session and resets the sandbox into the pool."""

    action: IdleAction
    after_seconds: int

    def __post_init__(self) -> None:
        if self.action not in IDLE_ACTIONS:
            raise ValueError(f"idle.action: {self.action!r} is not one of {', '.join(IDLE_ACTIONS)}")
        _positive(self.after_seconds, "idle.after_seconds")


@dataclass(frozen=True)
class Retention:
    """Snapshots kept per pool on this host: the newest `count`, none older than `max_age_seconds`."""

    count: int = 10
    max_age_seconds: int = 7 * 24 * 3600

    def __post_init__(self) -> None:
        _positive(self.count, "retention.count")
        _positive(self.max_age_seconds, "retention.max_age_seconds")


@dataclass(frozen=True)
class SizeLimits:
    """A size class as the runtime applies it to a sandbox (sandstack.runtime.sizes)."""

    cpus: float
    memory: int  # bytes; the sandbox gets no swap beyond it
    disk: int  # bytes: a class whose disk is not the pool's is served only by a sandbox created on demand
    pids: int

    def __post_init__(self) -> None:
        if isinstance(self.cpus, bool) or not isinstance(self.cpus, (int, float)) or self.cpus <= 0:
            raise ValueError(f"sizes: cpus {self.cpus!r} must be a number > 0")
        for name in ("memory", "disk", "pids"):
            _positive(getattr(self, name), f"sizes.{name}")


@dataclass(frozen=True)
class Sizes:
    """A pool's size classes (`pools.*.sizes`)."""

    default: SizeLimits  # the pool's own limits: what a claim naming no class gets and a release gives back
    classes: dict[str, SizeLimits]

    def __post_init__(self) -> None:
        if not self.classes:
            raise ValueError("sizes.classes: a pool with size classes declares at least one")


@dataclass(frozen=True)
class PoolRuntime:
    sandboxes: tuple[str, ...]  # Docker container names of the pool's sandboxes on this host
    workspace_root: str  # files, archives: confined to this directory
    writable: tuple[WritablePath, ...]  # what a snapshot saves and a reset empties
    idle: IdlePolicy | None = None  # None: sessions never idle out
    retention: Retention = field(default_factory=Retention)
    upload_limit_bytes: int = 64 * 1024 * 1024
    # A read, an archive or a snapshot is cut off past this many bytes (apparent size), never spooled beyond it.
    download_limit_bytes: int = 1024 * 1024 * 1024
    snapshot_storage_bytes: int = 8 * 1024 * 1024 * 1024  # all of the pool's snapshots and hibernation copies here
    # One session's share of it (`session.session_snapshot_storage`; the plan's default: snapshot_storage divided by
    # the pool's sandboxes on this host). None: no share (a configuration written before it).
    session_snapshot_storage_bytes: int | None = None
    # Per session (sandstack.runtime.retention): its newest `count`, none older than the age (None: the pool's).
    session_retention: Retention | None = None
    exec_max_timeout_seconds: int = 3600  # the longest timeout an exec may ask for (`session.exec_max_timeout`)
    output_limit_bytes: int = 1024 * 1024  # per stream of one exec (`session.exec_output_limit`)
    # The template's root is writable (`read_only_root: false`): a release resets it to the image and a snapshot
    # holds it too (sandstack.runtime.rootfs).
    writable_root: bool = False
    # The ceiling and the recipe of each place above the warm `sandboxes` (None: no on demand).
    ondemand: OnDemand | None = None
    wakes_per_hour: int = 60  # per URL site (`session.wakes_per_hour`): past it a wake is refused (429)
    terminal_idle_seconds: int | None = None  # a terminal without input or output this long is closed (None: never)
    # The template's network profiles a session may switch between, and the one it starts in (a released or reset
    # sandbox is back in it). Empty: none (docs/design/network-profiles.md).
    network_profiles: tuple[str, ...] = ()
    start_profile: str | None = None
    sizes: Sizes | None = None  # the size classes a claim may name (None: none; absent from the JSON)

    @property
    def places(self) -> tuple[str, ...]:
        """Every sandbox name of the pool on this host: the warm ones, then the on-demand places."""
        return self.sandboxes + (tuple(self.ondemand.places) if self.ondemand else ())

    def __post_init__(self) -> None:
        if not self.places or len(set(self.places)) != len(self.places):
            raise ValueError(f"sandboxes: {list(self.places)!r} must be a non-empty list of distinct names")
        _abs_path(self.workspace_root, "workspace_root")
        paths = [w.path for w in self.writable]
        if len(set(paths)) != len(paths):
            raise ValueError(f"writable: {paths!r} lists a path twice")
        for name in ("upload_limit_bytes", "download_limit_bytes", "snapshot_storage_bytes", "exec_max_timeout_seconds",
                     "output_limit_bytes"):
            _positive(getattr(self, name), name)
        if self.session_snapshot_storage_bytes is not None:
            _positive(self.session_snapshot_storage_bytes, "session_snapshot_storage_bytes")
        if (self.start_profile is None) != (not self.network_profiles) or (
                self.network_profiles and self.start_profile not in self.network_profiles):
            raise ValueError(f"start_profile: {self.start_profile!r} must be one of network_profiles "
                             f"{list(self.network_profiles)!r} (both unset without profiles)")


@dataclass(frozen=True)
class TokenScope:
    """A scoped token (sandstack.runtime.tokens): its value is in the environment variable `env` (a Pulumi
    secret, never in this file), and it acts only on `pools`."""

    pools: tuple[str, ...]  # the pools of this host it names (one with no replicas here is not among them)
    env: str


def token_env(scope: str) -> str:
    """The environment variable holding scope `scope`'s token ('tenant-a' → SANDSTACK_RUNTIME_TOKEN_TENANT_A)."""
    return f"{ENV_TOKEN}_{scope.upper().replace('-', '_')}"


@dataclass(frozen=True)
class SnapshotStore:
    """Where the host's snapshots are kept for every host of their pool (docs/design/snapshot-store.md): a registry
    of the Docker Registry HTTP API V2, each pool's snapshots in repository `<repository>/<pool>`, tagged by id. Its
    password (and CA, for https) are in the environment (ENV_STORE_PASSWORD, ENV_STORE_CA), never in this file."""

    registry: str  # http(s)://host[:port], no path
    repository: str
    username: str
    ca: bool = False  # whether ENV_STORE_CA holds the CA the registry's certificate is checked against

    def __post_init__(self) -> None:
        if not re.fullmatch(REGISTRY_URL_PATTERN, self.registry):
            raise ValueError(f"snapshot_store.registry: {self.registry!r} must be http(s)://host[:port]")
        if not re.fullmatch(REPOSITORY_PATTERN, self.repository):
            raise ValueError(f"snapshot_store.repository: {self.repository!r} must match {REPOSITORY_PATTERN}")


@dataclass(frozen=True)
class RuntimeConfig:
    host: str
    pools: dict[str, PoolRuntime]
    port: int = DEFAULT_PORT
    exec_timeout_seconds: int = 60  # when a request gives none (at most the pool's exec_max_timeout_seconds)
    idle_check_seconds: int = 5  # how often idle policies and sandbox health are checked
    idle_cpu_ms_per_s: int = 20  # CPU a sandbox may use and still be idle (the spec's, as the guard's)
    listen: str = "0.0.0.0"  # the address it serves on; in the host's network namespace, 127.0.0.1 keeps it local
    # The exit statuses of a sandbox the host guard ended for good at its max lifetime or idle timeout
    # (on_expiry 'stop'; the contract's, given by the plan): such a sandbox is never handed out again.
    exit_lifetime: int | None = None
    exit_idle: int | None = None
    tokens: dict[str, TokenScope] = field(default_factory=dict)  # scope name → its pools and env variable
    # The labels of this stack's and host's containers (sandstack.spec.contract's): how the runtime finds its
    # on-demand sandboxes among the daemon's containers, those of a pool no longer declared included.
    ondemand_labels: dict[str, str] = field(default_factory=dict)
    # The gateway container whose configuration volume holds each sandbox's network profile, when a pool here has
    # profiles (None: none has).
    gateway: str | None = None
    # The port of the SSH endpoint into sessions' sandboxes (docs/design/ssh.md), on the same addresses as the API;
    # None: no SSH.
    ssh_port: int | None = None
    # Where snapshots are kept for every host of their pool (docs/design/snapshot-store.md); None: this host's state
    # volume only.
    snapshot_store: SnapshotStore | None = None
    # With SSH: local forwards (`ssh -L`) to the session's own sandbox allowed, and the most open SSH connections from
    # one source address (docs/design/ssh.md). Absent from the JSON without SSH.
    ssh_forwarding: bool = False
    ssh_per_source: int = SSH_PER_SOURCE
    version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        if self.version != FORMAT_VERSION:
            raise ValueError(f"version: {self.version!r} is not {FORMAT_VERSION}, the format this runtime reads")
        if not (1 <= self.port <= 65535):
            raise ValueError(f"port: {self.port!r} must be 1-65535")
        if self.ssh_port is not None and (not 1 <= self.ssh_port <= 65535 or self.ssh_port == self.port):
            raise ValueError(f"ssh_port: {self.ssh_port!r} must be 1-65535 and not the API's port {self.port}")
        if not isinstance(self.ssh_forwarding, bool):
            raise ValueError(f"ssh_forwarding: {self.ssh_forwarding!r} must be true or false")
        if isinstance(self.ssh_per_source, bool) or not isinstance(self.ssh_per_source, int) \
                or self.ssh_per_source < 1:
            raise ValueError(f"ssh_per_source: {self.ssh_per_source!r} must be an integer >= 1")
        for name in ("exec_timeout_seconds", "idle_check_seconds", "idle_cpu_ms_per_s"):
            _positive(getattr(self, name), name)
        owners: dict[str, str] = {}
        for pool, spec in self.pools.items():
            for sandbox in spec.places:
                if sandbox in owners:
                    raise ValueError(f"pools.{pool}.sandboxes: {sandbox!r} is also in pool {owners[sandbox]!r}")
                owners[sandbox] = pool
        for scope, token in self.tokens.items():
            unknown = sorted(set(token.pools) - set(self.pools))
            if unknown:
                raise ValueError(f"tokens.{scope}.pools: {unknown!r} are not pools of this host")
        profiled = sorted(pool for pool, spec in self.pools.items() if spec.network_profiles)
        if profiled and not self.gateway:
            raise ValueError(f"gateway: pools {profiled!r} have network profiles, which the gateway enforces: name it")

    def pool_of(self, sandbox: str) -> str | None:
        return next((pool for pool, spec in self.pools.items() if sandbox in spec.places), None)

    def to_json(self) -> str:
        """Stable text (sorted keys): a changed config is a changed file, an unchanged one is byte-equal."""
        data = asdict(self)
        # Absent when unused: a host without network profiles or SSH keeps its runtime's configuration as it was.
        for key in ("gateway", "ssh_port", "snapshot_store"):
            if data[key] is None:
                del data[key]
        if self.ssh_port is None:
            del data["ssh_forwarding"], data["ssh_per_source"]
        for pool in data["pools"].values():
            if not pool["network_profiles"]:
                del pool["network_profiles"], pool["start_profile"]
            if pool["sizes"] is None:  # absent when unused, as gateway: a pool without classes reads as before
                del pool["sizes"]
            if pool["ondemand"] is not None and pool["ondemand"]["hibernated"] is None:  # likewise: no such ceiling
                del pool["ondemand"]["hibernated"]
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> RuntimeConfig:
        data = json.loads(text)
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RuntimeConfig:
        data = dict(data)
        try:
            pools = {name: _pool(p) for name, p in data.pop("pools").items()}
            tokens = {name: TokenScope(tuple(t["pools"]), t["env"]) for name, t in data.pop("tokens", {}).items()}
            store = data.pop("snapshot_store", None)
            return cls(pools=pools, tokens=tokens, snapshot_store=SnapshotStore(**store) if store else None, **data)
        except (KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"runtime config: {error}") from error


def _pool(data: dict[str, Any]) -> PoolRuntime:
    data = dict(data)
    return PoolRuntime(
        sandboxes=tuple(data.pop("sandboxes")),
        writable=tuple(WritablePath(**w) for w in data.pop("writable")),
        idle=IdlePolicy(**data.pop("idle")) if data.get("idle") else data.pop("idle", None),
        retention=Retention(**data.pop("retention", {})),
        session_retention=Retention(**data.pop("session_retention")) if data.get("session_retention") else
        data.pop("session_retention", None),
        ondemand=ondemand_of(data.pop("ondemand", None)),
        network_profiles=tuple(data.pop("network_profiles", ())),
        sizes=_sizes(data.pop("sizes", None)),
        **data,
    )


def _sizes(data: dict[str, Any] | None) -> Sizes | None:
    if data is None:
        return None
    return Sizes(SizeLimits(**data["default"]), {name: SizeLimits(**c) for name, c in data["classes"].items()})
