"""One sandbox container as one value, and its two renderings: the pulumi-docker `Container` inputs a warm sandbox is
registered with (sandstack.plan.stack) and the Docker Engine API `POST /containers/create` body the runtime makes an
on-demand one from (sandstack.plan.ondemand).

`SandboxContainer` is everything one replica's container is: the settings the spec decides (`SandboxPlan`,
sandstack.plan.sandbox), the snapshot image, the pool network and the volumes it mounts, each object by the Docker
name the plan fixes. The pool's mounts are derived here once (`pool_mounts`). The renderers are pure and decide
nothing: `pulumi_inputs` turns each named object into a reference to the node that makes it (so Pulumi orders and
renews the sandbox after it), `engine_body` keeps the names. `ENGINE_KEYS` is the one map of each pulumi-docker input
a sandbox sets to the body keys the provider makes of it, and `OUTSIDE_THE_BODY` says where each setting the body
does not carry goes; tests/differential/test_container_renderings.py holds both renderers to them for every pool of
the committed stacks and the test specs, and fails when a setting is rendered by only one of them
(docs/design/sandbox-container.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from sandstack.plan.container import Healthcheck
from sandstack.plan.contract import STATE_MOUNT
from sandstack.plan.data import plan_data
from sandstack.plan.sandbox import SandboxPlan
from sandstack.plan.secrets import plan_secrets
from sandstack.plan.tree import Ref, Secret, inputs, label_list, run_inputs
from sandstack.spec.models import SecretRef
from sandstack.spec.resolve import ResolvedTemplate
from sandstack.spec.units import MIB


@dataclass(frozen=True)
class VolumeMount:
    volume: str  # the Docker volume's name
    target: str
    read_only: bool


@dataclass(frozen=True)
class SandboxContainer:
    settings: SandboxPlan  # what the spec decides for this replica
    image: str  # the snapshot image's name (templates with the same snapshot share the first one's)
    network: str  # the pool network's name
    mounts: tuple[VolumeMount, ...]  # the pool's (`pool_mounts`), then the replica's disk workspaces


def pool_mounts(stack: str, pool: str, template: ResolvedTemplate, guard_state: str) -> tuple[VolumeMount, ...]:
    """What every sandbox of the pool mounts, read-only, by volume name: the guard's state (the boot-id marker: the
    supervisor starts the command only once the host is closed), the pool's secrets, its data volumes."""
    mounts = [VolumeMount(guard_state, STATE_MOUNT, True)]
    secrets = plan_secrets(stack, pool, template)
    if secrets:
        mounts.append(VolumeMount(secrets.volume, secrets.path, True))
    data = plan_data(stack, pool, template)
    if data:
        mounts += [VolumeMount(v.name, v.path, True) for v in data.volumes]
    return tuple(mounts)


def sandbox_container(settings: SandboxPlan, *, image: str, network: str,
                      shared: tuple[VolumeMount, ...]) -> SandboxContainer:
    """The replica's container: the pool's `shared` mounts, then its disk workspaces (writable; Docker fills a new
    one from the image only when the guard made it empty, `seed`)."""
    workspaces = tuple(VolumeMount(w.name, w.path, False) for w in settings.workspaces)
    return SandboxContainer(settings, image, network, (*shared, *workspaces))


def pulumi_inputs(container: SandboxContainer, node_of: Mapping[str, str]) -> dict[str, Any]:
    """The `docker.Container` inputs, each named object a `Ref` to its node (`node_of`: Docker name → node key)."""
    plan = container.settings
    return inputs(
        name=plan.name, hostname=plan.hostname, image=Ref(node_of[container.image], "image_id"), user=plan.user,
        working_dir=plan.workdir,
        # The supervisor (under Docker's init) starts the command once the host is closed and turns the guard's
        # lifetime verdicts into exit statuses; the guard enforces them from outside.
        entrypoints=list(plan.entrypoints), command=list(plan.command) if plan.command else None, init=True,
        envs=[Secret(v.secret, f"{k}={{}}") if isinstance(v, SecretRef) else f"{k}={v}" for k, v in plan.env.items()],
        labels=label_list(plan.labels),
        networks_advanced=[{"name": Ref(node_of[container.network], "name")}],
        dns=list(plan.dns) if plan.dns else None,
        ports=[inputs(internal=p.internal, external=p.external, ip=p.ip, protocol=p.protocol) for p in plan.ports],
        read_only=plan.read_only, storage_opts=plan.storage_opts, tmpfs=plan.tmpfs, shm_size=plan.shm_size_mb,
        # read_only only where set: the provider's default is writable, and a workspace's inputs read as before.
        mounts=[{"type": "volume", "source": Ref(node_of[m.volume], "name"), "target": m.target,
                 **({"read_only": True} if m.read_only else {})} for m in container.mounts],
        capabilities=inputs(drops=["ALL"], adds=list(plan.capability_adds) or None),
        security_opts=list(plan.security_opts) if plan.security_opts else None,
        privileged=plan.privileged, runtime=plan.runtime, memory=plan.memory_mb, memory_swap=plan.memory_mb,
        cpus=plan.cpus,
        # Open files per process, hard limit too: with the pids limit, this bounds the sockets a sandbox holds.
        ulimits=[{"name": "nofile", "soft": plan.open_files, "hard": plan.open_files}],
        cgroup_parent=plan.cgroup_parent, platform=plan.platform,
        # The host's own devices of the requested model, by id (placement: sandstack/plan/host.py).
        device_requests=[{"driver": "nvidia", "device_ids": list(plan.gpu_device_ids), "capabilities": ["gpu"]}]
        if plan.gpu_device_ids else None,
        **run_inputs(plan.run))


def _ns(duration: str) -> int:
    """The plan's durations are whole seconds ('5s', sandstack.plan.sandbox._duration)."""
    if not duration.endswith("s") or not duration[:-1].isdigit():
        raise ValueError(f"duration {duration!r} is not whole seconds")
    return int(duration[:-1]) * 1_000_000_000


def _healthcheck(check: Healthcheck) -> dict[str, Any]:
    return {"Test": list(check.tests), "Interval": _ns(check.interval), "Timeout": _ns(check.timeout),
            "StartPeriod": _ns(check.start_period), "StartInterval": 0, "Retries": check.retries}


def engine_body(container: SandboxContainer) -> dict[str, Any]:
    """The create body, as the provider sends it for the same inputs (with the values it always sends), on the pool
    network at once (the provider creates on the default bridge, then connects it)."""
    plan, network = container.settings, container.network
    if any(isinstance(v, SecretRef) for v in plan.env.values()):
        raise ValueError(f"sandbox {plan.name!r}: a secret in the environment cannot go into an on-demand recipe "
                         "(rule ondemand-secret-env)")
    run = plan.run
    config: dict[str, Any] = {
        "Image": container.image, "Hostname": plan.hostname, "Domainname": "", "Tty": False, "OpenStdin": False,
        "StopSignal": "", "User": plan.user, "Entrypoint": list(plan.entrypoints),
        "Env": [f"{k}={v}" for k, v in plan.env.items()], "Labels": dict(plan.labels),
    }
    if plan.workdir:
        config["WorkingDir"] = plan.workdir
    if plan.command:
        config["Cmd"] = list(plan.command)
    if run.healthcheck:
        config["Healthcheck"] = _healthcheck(run.healthcheck)
    host: dict[str, Any] = {
        "Privileged": plan.privileged, "PublishAllPorts": False, "Runtime": plan.runtime, "AutoRemove": False,
        "RestartPolicy": {"Name": run.restart, "MaximumRetryCount": run.max_retry_count or 0},
        "Mounts": [{"Type": "volume", "Source": m.volume, "Target": m.target, "ReadOnly": m.read_only}
                   for m in container.mounts],
        "ReadonlyRootfs": plan.read_only, "LogConfig": {"Type": run.logs.driver, "Config": run.logs.opts},
        "NetworkMode": network, "Init": True, "Memory": plan.memory_mb * MIB, "MemorySwap": plan.memory_mb * MIB,
        "ShmSize": plan.shm_size_mb * MIB, "NanoCpus": round(float(plan.cpus) * 1_000_000_000),
        "Ulimits": [{"Name": "nofile", "Soft": plan.open_files, "Hard": plan.open_files}],
        "Tmpfs": dict(plan.tmpfs), "CapAdd": list(plan.capability_adds), "CapDrop": ["ALL"],
        "CgroupParent": plan.cgroup_parent,
    }
    if plan.dns:
        host["Dns"] = list(plan.dns)
    if plan.security_opts:
        host["SecurityOpt"] = list(plan.security_opts)
    if plan.storage_opts:
        host["StorageOpt"] = dict(plan.storage_opts)
    if plan.gpu_device_ids:
        host["DeviceRequests"] = [{"Driver": "nvidia", "Count": 0, "DeviceIDs": list(plan.gpu_device_ids),
                                   "Capabilities": [["gpu"]], "Options": {}}]
    if plan.ports:
        config["ExposedPorts"] = {f"{p.internal}/{p.protocol}": {} for p in plan.ports}
        host["PortBindings"] = {f"{p.internal}/{p.protocol}": [{"HostIp": p.ip, "HostPort": str(p.external or 0)}]
                                for p in plan.ports}
    return {**config, "HostConfig": host, "NetworkingConfig": {"EndpointsConfig": {network: {}}}}


# Each input `pulumi_inputs` may set → the body keys the provider makes of it ('/' goes into HostConfig and its
# objects). Every key of `engine_body` is in one row, or is a value the provider sends whatever the inputs.
ENGINE_KEYS: dict[str, tuple[str, ...]] = {
    "name": (),  # the create call's `name`
    "hostname": ("Hostname",),
    "image": ("Image",),
    "user": ("User",),
    "working_dir": ("WorkingDir",),
    "entrypoints": ("Entrypoint",),
    "command": ("Cmd",),
    "init": ("HostConfig/Init",),
    "envs": ("Env",),
    "labels": ("Labels",),
    "networks_advanced": ("HostConfig/NetworkMode", "NetworkingConfig"),
    "dns": ("HostConfig/Dns",),
    "ports": ("ExposedPorts", "HostConfig/PortBindings"),
    "read_only": ("HostConfig/ReadonlyRootfs",),
    "storage_opts": ("HostConfig/StorageOpt",),
    "tmpfs": ("HostConfig/Tmpfs",),
    "shm_size": ("HostConfig/ShmSize",),
    "mounts": ("HostConfig/Mounts",),
    "capabilities": ("HostConfig/CapAdd", "HostConfig/CapDrop"),
    "security_opts": ("HostConfig/SecurityOpt",),
    "privileged": ("HostConfig/Privileged",),
    "runtime": ("HostConfig/Runtime",),
    "memory": ("HostConfig/Memory",),
    "memory_swap": ("HostConfig/MemorySwap",),
    "cpus": ("HostConfig/NanoCpus",),
    "ulimits": ("HostConfig/Ulimits",),
    "cgroup_parent": ("HostConfig/CgroupParent",),
    "platform": (),  # the create call's `platform`
    "device_requests": ("HostConfig/DeviceRequests",),
    "restart": ("HostConfig/RestartPolicy/Name",),
    "max_retry_count": ("HostConfig/RestartPolicy/MaximumRetryCount",),
    "healthcheck": ("Healthcheck",),
    "log_driver": ("HostConfig/LogConfig/Type",),
    "log_opts": ("HostConfig/LogConfig/Config",),
    # How the provider creates and deletes, not what: no body key.
    "wait": (), "wait_timeout": (), "destroy_grace_seconds": (),
}

# The settings an on-demand body does not carry, and where each goes instead. Every other setting changes both
# renderings (tests/differential/test_container_renderings.py).
OUTSIDE_THE_BODY: dict[str, str] = {
    "name": "the place's key in the recipe; the runtime passes it as the create call's name",
    "wait_timeout": "the recipe's wait_seconds: how long the runtime waits for the readiness probe",
    "public_urls": "no container setting: the review's and policy's record of the url ports a public ingress "
                   "serves (the warm inputs do not carry it either)",
    "platform": "pulumi-docker's create call only: the runtime's create passes no platform and the daemon takes the "
                "snapshot image the host built for it (docs/design/platforms.md: not proven on the engine)",
}
NOT_AN_INPUT = frozenset({"public_urls"})  # of OUTSIDE_THE_BODY, what the warm inputs do not carry either
