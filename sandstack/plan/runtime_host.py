"""A host's runtime service, as plain values: its `RuntimeConfig` (sandstack.plan.runtime, the contract the
service reads) from the resolved spec, and how its container runs (docs/design/runtime.md).

The service is sandstack's own code: the files of `sandstack.runtime` and the one plan module it reads travel
in the container's environment as a reproducible tar.gz (the provider can upload only onto the root, which is
read-only) and run on the infra image's Python (FastAPI, uvicorn and the Docker SDK from Debian), so a new
sandstack version renews the container and nothing is built or pulled for it.
"""

from __future__ import annotations

import base64
import functools
import gzip
import io
import tarfile
from dataclasses import dataclass
from importlib.resources import files
from sandstack.plan.container import LogRotation, RunSettings, host_role
from sandstack.plan.contract import (CONFIG_DIR, EXIT_IDLE, EXIT_LIFETIME, IDLE_CPU_MS_PER_S, LABEL_HOST,
                                     LABEL_STACK, RUN_DIR)
from sandstack.plan.naming import infra_name
from sandstack.plan.placement import Placement
from sandstack.plan.recipe import OnDemand
from sandstack.plan.reload import ConfigSet
from sandstack.plan.runtime import (DEFAULT_STATE_DIR, ENV_CONFIG_DIR, ENV_CONFIG_TEXT, ENV_STATE_DIR, IdlePolicy,
                                    PoolRuntime, Retention, RuntimeConfig, SizeLimits, Sizes, SnapshotStore,
                                    TokenScope, WritablePath, token_env)
from sandstack.plan.sandbox import sandbox_name
from sandstack.spec.models.hosts import RuntimeService
from sandstack.spec.resolve import EffectiveLimits, ResolvedTemplate

# RUN_DIR is a tmpfs here: the code (PYTHONPATH), unpacked at start.
CODE_DIR = f"{RUN_DIR}/code"
# The code's archive (base64) goes in up to CODE_PARTS variables of at most CODE_PART characters: the kernel refuses
# a process any one environment string past 128 KiB (MAX_ARG_STRLEN), and the container then never starts (the
# archive passed that size at 130 KiB: the runtime's deployment failed its health check, nothing logged).
CODE_ENV, CODE_PARTS, CODE_PART = "SANDSTACK_RUNTIME_CODE", 4, 96 * 1024
_CODE = " ".join(f'"${CODE_ENV}_{i}"' for i in range(CODE_PARTS))
# Its configuration is a set in its configuration volume (docs/design/live-changes.md), delivered by its reload
# container, which runs after it: a first start waits for one (sandstack.runtime.__main__ `load`).
ENTRYPOINT = (f'mkdir -p {CODE_DIR} && printf "%s" {_CODE} | base64 -d | tar -xz -C {CODE_DIR} '
              f'&& exec python3 -m sandstack.runtime')
# Where it serves (address and port): in its environment, not only its configuration, because it binds them at start:
# a change renews the container (its reload would be refused). The host's ingress reaches it by a unix socket in its
# configuration volume (sandstack.spec.contract.WAKE_SOCKET), which the ingress mounts: nothing here names the ingress.
ENV_LISTEN = "SANDSTACK_RUNTIME_LISTEN"
# The SSH endpoint's port, for the same reason (docs/design/ssh.md); absent without `runtime.ssh`.
ENV_SSH_PORT = "SANDSTACK_RUNTIME_SSH_PORT"
# A first start on a loaded host (unpacking, imports, SQLite) can take several seconds: its reload waits as long.
RELOAD_WAIT_SECONDS = 120
DOCKER_SOCKET = "/var/run/docker.sock"  # the host daemon's socket, where Docker puts it by default
MEMORY_MB = 256
CPUS = "1"
TMPFS = {"/tmp": "rw,nosuid,nodev,noexec,size=64m",  # upload spooling beyond memory goes to the state volume
         RUN_DIR: "rw,nosuid,nodev,noexec,size=16m"}
LOGS = LogRotation("10m", 5)
# Seconds: a stop hibernates each bound on-demand sandbox (its tmpfs paths copied out). Set with or without on-demand
# pools (a stop without them ends at once): a first `max` would otherwise renew the runtime for this input alone.
ONDEMAND_STOP_GRACE = 120


def code_files() -> tuple[str, ...]:
    """The package files the service imports: the runtime package (its routes' too) and its contract modules
    (listed when the runtime is planned, not when this module is imported by every command)."""
    shipped = []
    for package in ("runtime", "runtime/routes"):
        folder = files("sandstack").joinpath(package)
        shipped += [f"{package}/{f.name}" for f in sorted(folder.iterdir(), key=lambda f: f.name)
                    if f.name.endswith(".py")]
    return ("__init__.py", "plan/__init__.py", "plan/recipe.py", "plan/runtime.py", "spec/__init__.py",
            "spec/contract.py", *shipped)


# The spec layer's package file imports its models; the runtime needs only its leaf contract module
# (sandstack.spec.contract: the configuration volume's paths), so its container gets a package file that imports
# nothing in its place.
STUBS = {"spec/__init__.py": b'"""sandstack.spec.contract alone: the runtime\'s container (sandstack.plan.runtime_host)."""\n'}


def workspace_root(template: ResolvedTemplate) -> str:
    """The session's root: declared, else the working directory, else the first writable path."""
    return (template.session.workspace or template.workdir
            or next((w.path for w in template.writable), None) or "/tmp")


def pool_runtime(stack: str, placement: Placement, ondemand: OnDemand | None = None) -> PoolRuntime:
    t, session = placement.template, placement.template.session
    # Each sandbox's fair part of the pool's storage, unless declared: no session fills it for the others.
    ceiling = max(placement.places if ondemand else placement.replicas, 1)
    return PoolRuntime(
        sandboxes=tuple(sandbox_name(stack, placement.pool, i) for i in range(placement.replicas)),
        workspace_root=workspace_root(t),
        writable=tuple(WritablePath(w.path, w.type, w.type == "disk" and w.seed) for w in t.writable),
        idle=IdlePolicy(session.idle, session.idle_after) if session.idle != "never" else None,
        retention=Retention(session.snapshots, session.snapshot_max_age),
        upload_limit_bytes=session.upload_limit,
        download_limit_bytes=session.download_limit,
        snapshot_storage_bytes=session.snapshot_storage,
        session_snapshot_storage_bytes=session.session_snapshot_storage or max(session.snapshot_storage // ceiling, 1),
        session_retention=(Retention(session.session_snapshots or session.snapshots,
                                     session.session_snapshot_max_age or session.snapshot_max_age)
                           if session.session_snapshots or session.session_snapshot_max_age else None),
        exec_max_timeout_seconds=session.exec_max_timeout,
        output_limit_bytes=session.exec_output_limit,
        writable_root=not t.read_only_root,
        ondemand=ondemand,
        wakes_per_hour=session.wakes_per_hour,
        terminal_idle_seconds=session.terminal_idle,
        network_profiles=tuple(name for name, _ in t.network_profiles),
        start_profile=t.start_profile,
        sizes=pool_sizes(placement),
    )


def pool_sizes(placement: Placement) -> Sizes | None:
    """The pool's size classes as the runtime applies them; None when it declares none."""
    if not placement.sizes:
        return None
    return Sizes(size_limits(placement.template.limits), {name: size_limits(l) for name, l in placement.sizes})


def size_limits(limits: EffectiveLimits) -> SizeLimits:
    return SizeLimits(limits.cpus, limits.memory, limits.disk, limits.pids)


@dataclass(frozen=True)
class RuntimeHostPlan:
    stack: str
    spec: RuntimeService
    config: RuntimeConfig

    @property
    def container_name(self) -> str:
        return infra_name(self.stack, "runtime")

    @property
    def state_volume(self) -> str:
        return infra_name(self.stack, "runtime-state")

    @property
    def env(self) -> list[str]:
        """Everything but the token, which the component adds from its secret."""
        c = self.config
        return [f"PYTHONPATH={CODE_DIR}", "PYTHONDONTWRITEBYTECODE=1", f"{ENV_CONFIG_DIR}={CONFIG_DIR}",
                f"{ENV_STATE_DIR}={DEFAULT_STATE_DIR}", *code_env(),
                f"{ENV_LISTEN}={c.listen} {c.port}",
                *([f"{ENV_SSH_PORT}={c.ssh_port}"] if c.ssh_port is not None else [])]

    @property
    def config_set(self) -> ConfigSet:
        """Its configuration (pools, ceilings, idle policies, token scopes' pools): the JSON the runtime reads,
        taken in place (sandstack.runtime.reload)."""
        return ConfigSet("runtime", ((ENV_CONFIG_TEXT, self.config.to_json()),), wait_seconds=RELOAD_WAIT_SECONDS)

    @property
    def run(self) -> RunSettings:
        # Generous: on a loaded host the first start (unpacking, imports, SQLite) can take several seconds.
        # With on-demand pools, time at its stop to hibernate or retire them (sandstack.runtime.ondemand.shutdown).
        grace = ONDEMAND_STOP_GRACE
        # Not waited for at create: it serves once its reload container delivered a configuration, and that
        # container waits until the runtime has it in force (RELOAD_WAIT_SECONDS).
        return host_role(self.health_test, LOGS, retries=20, timeout="5s", start_period="10s",
                         destroy_grace_seconds=grace, wait=False)

    @property
    def ondemand(self) -> bool:
        return any(pool.ondemand for pool in self.config.pools.values())

    @property
    def health_test(self) -> tuple[str, ...]:
        url = f"http://127.0.0.1:{self.config.port}/healthz"
        return ("CMD", "python3", "-c", f"import urllib.request; urllib.request.urlopen({url!r}, timeout=2)")


def code_env() -> list[str]:
    """The code's archive as `SANDSTACK_RUNTIME_CODE_<i>=...` parts, which ENTRYPOINT joins again."""
    code = code_archive()
    parts = [code[i:i + CODE_PART] for i in range(0, len(code), CODE_PART)]
    if len(parts) > CODE_PARTS:
        raise ValueError(f"the runtime's code archive is {len(code)} characters: more than {CODE_PARTS} "
                         f"environment variables of {CODE_PART} hold (raise CODE_PARTS in {__name__})")
    return [f"{CODE_ENV}_{i}={part}" for i, part in enumerate(parts)]


@functools.lru_cache(maxsize=1)  # the same files for every host of a run
def code_archive() -> str:
    """The service's package files as base64 of a tar.gz that is byte-equal for equal files (no times, owners
    or order of its own), so an unchanged sandstack never renews the container."""
    package, raw = files("sandstack"), io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for relative in code_files():
            data = STUBS.get(relative) or package.joinpath(relative).read_bytes()
            info = tarfile.TarInfo(f"sandstack/{relative}")
            info.size, info.mode, info.mtime = len(data), 0o444, 0
            tar.addfile(info, io.BytesIO(data))
    return base64.b64encode(gzip.compress(raw.getvalue(), mtime=0)).decode()


def plan_runtime(stack: str, host: str, spec: RuntimeService | None, placements: list[Placement],
                 ondemand: dict[str, OnDemand | None] | None = None) -> RuntimeHostPlan | None:
    """`ondemand`: the recipe of each pool with a ceiling above its warm count (sandstack.plan.ondemand). The
    ingress's sites are not in its configuration: each wake names its sandbox (sandstack.plan.ingress), so a url
    port, a replica's site or the domain changed leaves the runtime as it is."""
    if spec is None:
        return None
    ondemand = ondemand or {}
    pools = {p.pool: pool_runtime(stack, p, ondemand.get(p.pool)) for p in placements if p.ceiling > 0}
    listen = "0.0.0.0" if spec.exposure == "public" else "127.0.0.1"
    config = RuntimeConfig(host=host, pools=pools, port=spec.port, idle_cpu_ms_per_s=IDLE_CPU_MS_PER_S,
                           exit_lifetime=EXIT_LIFETIME, exit_idle=EXIT_IDLE,
                           ondemand_labels={LABEL_STACK: stack, LABEL_HOST: host},
                           listen=listen,
                           tokens={scope: TokenScope(tuple(p for p in t.pools if p in pools), token_env(scope))
                                   for scope, t in spec.tokens.items()},
                           # Where a session's network profile is recorded (docs/design/network-profiles.md).
                           gateway=infra_name(stack, "gateway") if any(p.network_profiles for p in pools.values())
                           else None,
                           ssh_port=spec.ssh.port if spec.ssh else None,
                           snapshot_store=snapshot_store(spec),
                           **({"ssh_forwarding": spec.ssh.forwarding == "local",
                               "ssh_per_source": spec.ssh.max_connections_per_source} if spec.ssh else {}))
    return RuntimeHostPlan(stack, spec, config)


def snapshot_store(spec: RuntimeService) -> SnapshotStore | None:
    """The store as the runtime reads it; its password and CA go in its environment (sandstack.plan.stack_host)."""
    store = spec.snapshot_store
    if store is None:
        return None
    return SnapshotStore(store.registry, store.repository, store.username, ca=store.ca is not None)
