"""What one sandbox container is, as plain values: the plan `SandboxPool` turns into a `docker.Container`.

Pure functions: nothing here registers or reads a Pulumi resource. The few inputs only known while Pulumi runs (the image id, the network's name, the
volumes, secret values) are filled in by the component; everything the spec decides is here, so a test
of a sandbox's settings needs no mocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sandstack.plan.container import Healthcheck, LogRotation, RunSettings
from sandstack.plan.contract import (CRASH_RETRIES, EXIT_IDLE, EXIT_LIFETIME, LABEL_DIGEST, LABEL_HOST, LABEL_POOL,
                                     LABEL_REPLICA, LABEL_ROLE, LABEL_SUBNET, LABEL_TEMPLATE, LABEL_VERSION,
                                     SESSION_SECRETS_DIR, STATE_MOUNT, cgroup_parent)
from sandstack.plan.ingress import public_hostname, url_env, url_of
from sandstack.plan.naming import docker_name
from sandstack.plan.network import NO_PROXY, PoolNetwork
from sandstack.plan.secrets import session_secrets_mode
from sandstack.plan.snapshot import SUPERVISOR_PATH
from sandstack.plan.workspace import WorkspaceVolume, plan_workspaces
from sandstack.spec.envrefs import PUBLIC_HOSTNAME, render
from sandstack.spec.models import Port, SecretRef
from sandstack.spec.models.hosts import Ingress
from sandstack.spec.resolve import ResolvedTemplate
from sandstack.spec.units import MIB

SESSION_SECRETS_MIB = 4  # what a claim's secret files may take: 64 files of 64 KiB at most

EXPOSURE_BIND = {"host": "127.0.0.1", "public": "0.0.0.0"}
# 'stop': a crash is retried a bounded number of times, with the lifetime clock kept (the guard's), and a
# sandbox the guard expired ends at once on each retry; 'restart': every run is a fresh sandbox.
RESTART_POLICY = {"stop": "on-failure", "restart": "unless-stopped"}
# The supervisor takes the contract it shares with sandstack as arguments, not environment: the command
# inherits its environment, and a template's `env` must not be able to move the guard's state.
SUPERVISOR_ENTRYPOINT = (SUPERVISOR_PATH, f"--exit-lifetime={EXIT_LIFETIME}", f"--exit-idle={EXIT_IDLE}",
                         f"--guard-state={STATE_MOUNT}", "--")
# Time for the supervisor to pass a stop on to the command, and for the command to end cleanly.
DESTROY_GRACE_SECONDS = 10
LOGS = LogRotation("10m", 3)


def sandbox_name(stack: str, pool: str, index: int) -> str:
    return docker_name(stack, pool, str(index))


def output_name(host: str, pool: str, index: int) -> str:
    """`local/python/0`: how the stack's `sandboxes` output names a sandbox (unique per stack, unlike the Docker
    name, which is unique per host)."""
    return f"{host}/{pool}/{index}"


def port_address(port: Port, external: int | None, *, host_address: str, ingress: Ingress | None, pool: str,
                 index: int) -> str | None:
    """Where a client reaches a sandbox's port, for the `sandboxes` output: a published port on the host's loopback
    or public address (`external`, which Docker may only pick at run time), a url port at its URL, else None."""
    if port.exposure == "url" and ingress:
        return url_of(ingress, pool, index, port.port)
    if not external:
        return None
    where = EXPOSURE_BIND["host"] if port.exposure == "host" else host_address
    return f"{where}:{external}"


@dataclass(frozen=True)
class PortBinding:
    internal: int
    external: int | None
    ip: str
    protocol: str


@dataclass(frozen=True)
class SandboxPlan:
    name: str  # Docker container name
    hostname: str
    user: str
    workdir: str | None
    entrypoints: tuple[str, ...]
    command: tuple[str, ...] | None
    env: dict[str, str | SecretRef]  # sorted by name; SecretRef values are resolved by the component
    labels: dict[str, str]
    ports: tuple[PortBinding, ...]
    public_urls: tuple[int, ...]  # url ports the host's ingress serves on all its interfaces (public exposure)
    dns: tuple[str, ...] | None  # a connection-logged pool's logging resolver; else Docker's default
    read_only: bool
    storage_opts: dict[str, str] | None
    tmpfs: dict[str, str]
    workspaces: tuple[WorkspaceVolume, ...]  # disk workspaces, mounted as volumes
    shm_size_mb: int
    capability_adds: tuple[str, ...]
    security_opts: tuple[str, ...] | None
    privileged: bool
    runtime: str
    memory_mb: int
    cpus: str
    open_files: int
    cgroup_parent: str
    gpu_device_ids: tuple[str, ...] | None  # the host's devices this sandbox gets (placement: plan.host)
    healthcheck: Healthcheck | None
    wait_timeout: int | None
    restart: str
    max_retry_count: int | None
    platform: str | None = None  # the template's `platform` (the image's); None: the host's own

    @property
    def run(self) -> RunSettings:
        # A property, not a field: previews list the fields, and these add nothing a sandbox's spec decides.
        return RunSettings(self.healthcheck, self.wait_timeout, LOGS, self.restart, self.max_retry_count,
                           DESTROY_GRACE_SECONDS)


def session_secrets_tmpfs(template: ResolvedTemplate) -> str:
    """A claim's secret files (sandstack.runtime.secret_files): memory only, a fresh one at each container start,
    the sandbox user's alone where the user is numeric (else sticky and world-writable, each file still 0400)."""
    uid, _, gid = template.user.partition(":")
    mode = session_secrets_mode(template.user)  # the seeder gives its mount point the same (Docker copies that one)
    owner = f",mode={mode},uid={uid},gid={gid if gid.isdigit() else uid}" if uid.isdigit() else f",mode={mode}"
    return f"rw,nosuid,nodev,noexec,size={SESSION_SECRETS_MIB * MIB}" + owner


def _owner(path: str, template: ResolvedTemplate) -> str:
    """The tmpfs at the working directory is the sandbox user's: when the image lacks that directory, Docker makes
    it and the tmpfs on it ends up 0755 root (measured on 20.10), which the user could not write."""
    uid, _, gid = template.user.partition(":")
    if path != template.workdir or not uid.isdigit():
        return ""
    return f",uid={uid},gid={gid if gid.isdigit() else uid}"


def _duration(seconds: int) -> str:
    return f"{seconds}s"


def plan_sandbox(*, stack: str, pool: str, host: str, template: ResolvedTemplate, index: int,
                 network: PoolNetwork, digest: str, labels: dict[str, str],
                 gpu_device_ids: tuple[str, ...] = (), ingress: Ingress | None = None) -> SandboxPlan:
    t = template
    name = sandbox_name(stack, pool, index)
    urls = url_env(ingress, pool, index, t.ports)
    # `${SANDSTACK_PUBLIC_HOSTNAME}`, `${SANDSTACK_URL_<NAME>}`: this sandbox's own (the rules refused any other). The
    # public host name is there to refer to on any host with an ingress; only a sandbox with url ports is given the
    # variables themselves (so an ingress added to a host leaves the others running).
    values = {**({PUBLIC_HOSTNAME: public_hostname(pool, index, ingress.domain)} if ingress else {}), **urls}
    env = {**{k: render(v, values) if isinstance(v, str) and "${SANDSTACK_" in v else v for k, v in t.env.items()},
           **urls}
    if network.proxy_url:
        proxy = network.proxy_url
        env.update(HTTP_PROXY=proxy, HTTPS_PROXY=proxy, http_proxy=proxy, https_proxy=proxy,
                   NO_PROXY=NO_PROXY, no_proxy=NO_PROXY)
    healthcheck = wait_timeout = None
    if t.readiness:
        r = t.readiness
        healthcheck = Healthcheck(("CMD", *r.command), _duration(r.interval), _duration(r.timeout), r.retries,
                                  _duration(r.start_period))
        # Long enough for the probe to pass within its retries, with room for a slow first start.
        wait_timeout = r.start_period + (r.retries + 2) * (r.interval + r.timeout) + 30
    command = (*(t.entrypoint or ()), *(t.command or ()))
    return SandboxPlan(
        name=name,
        hostname=f"{pool}-{index}",
        user=t.user,
        workdir=t.workdir,
        entrypoints=SUPERVISOR_ENTRYPOINT,
        command=command or None,
        env=dict(sorted(env.items())),
        labels={
            **labels,
            LABEL_ROLE: "sandbox",
            LABEL_TEMPLATE: t.name,
            LABEL_VERSION: t.snapshot_version or "",
            LABEL_DIGEST: digest,
            LABEL_POOL: pool,
            LABEL_HOST: host,
            LABEL_REPLICA: str(index),
            # The network is referred to by its unchanging name: a new subnet must still move the sandbox.
            LABEL_SUBNET: str(network.subnet),
        },
        ports=tuple(PortBinding(p.port, p.host_port, EXPOSURE_BIND[p.exposure], p.protocol)
                    for p in t.ports if p.exposure in EXPOSURE_BIND),
        dns=(network.resolver,) if network.resolver else None,
        public_urls=tuple(p.port for p in t.ports if p.exposure == "url" and ingress and ingress.exposure == "public"),
        read_only=t.read_only_root,
        # A writable root is allowed only on hosts with `storage_quota` (rule disk-enforced): cap it there.
        storage_opts={"size": str(t.limits.disk)} if not t.read_only_root else None,
        # noexec unless the path opts in: a binary dropped into a writable path cannot be run from there.
        tmpfs={**{w.path: f"rw,nosuid,nodev,{'exec' if w.exec else 'noexec'},size={w.size},mode=1777"
                  + _owner(w.path, t) for w in t.writable if w.type == "tmpfs"},
               SESSION_SECRETS_DIR: session_secrets_tmpfs(t)},
        workspaces=plan_workspaces(stack, name, t),
        # /dev/shm is memory any process can fill: bounded like the writable paths (the input is in MiB).
        shm_size_mb=t.shm_size // MIB,
        capability_adds=tuple(t.capabilities),
        security_opts=("no-new-privileges:true",) if t.no_new_privileges else None,
        privileged=t.privileged,
        runtime=t.runtime,
        memory_mb=math.ceil(t.limits.memory / MIB),
        cpus=f"{t.limits.cpus:g}",
        open_files=t.limits.open_files,
        cgroup_parent=cgroup_parent(name),
        gpu_device_ids=gpu_device_ids or None,
        healthcheck=healthcheck,
        wait_timeout=wait_timeout,
        restart=RESTART_POLICY[t.lifecycle.on_expiry],
        max_retry_count=CRASH_RETRIES if t.lifecycle.on_expiry == "stop" else None,
        platform=t.platform,
    )
