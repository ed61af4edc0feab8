"""A pool's on-demand places as the runtime's recipe (sandstack.plan.recipe): for each replica between the pool's warm
count and its ceiling, the Engine API body of the container its component would make for that replica.

Each body comes from the same `plan_sandbox` and the same mounts as the warm sandboxes (plan/stack.py
`_sandbox_inputs`), with the other objects it refers to by their names (which the plan fixes) instead of Pulumi
references: the snapshot image by its tag, the pool network, the guard's state volume, the pool's secrets and
data volumes, the place's disk workspace volumes (Pulumi makes them with the warm ones', so the guard attaches their
filesystems). tests/plan/test_ondemand_plan.py holds each body to what the provider model makes of the warm node's
inputs for the same replica.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sandstack.plan.container import Healthcheck
from sandstack.plan.contract import STATE_MOUNT
from sandstack.plan.data import plan_data
from sandstack.plan.network import PoolNetwork
from sandstack.plan.recipe import LABEL_ONDEMAND, LABEL_RECIPE, OnDemand, difference
from sandstack.plan.sandbox import SandboxPlan, plan_sandbox
from sandstack.plan.secrets import plan_secrets
from sandstack.spec.models import SecretRef
from sandstack.spec.models.hosts import Ingress
from sandstack.spec.resolve import ResolvedTemplate

MIB = 1024 * 1024


def pool_mounts(stack: str, pool: str, template: ResolvedTemplate, guard_state: str) -> list[dict[str, Any]]:
    """The pool's shared mounts, by volume name, in the order `_pool` gives them to its sandboxes."""
    mounts = [{"Type": "volume", "Source": guard_state, "Target": STATE_MOUNT, "ReadOnly": True}]
    secrets = plan_secrets(stack, pool, template)
    if secrets:
        mounts.append({"Type": "volume", "Source": secrets.volume, "Target": secrets.path, "ReadOnly": True})
    data = plan_data(stack, pool, template)
    if data:
        mounts += [{"Type": "volume", "Source": v.name, "Target": v.path, "ReadOnly": True} for v in data.volumes]
    return mounts


def _ns(duration: str) -> int:
    """The plan's durations are whole seconds ('5s', sandstack.plan.sandbox._duration)."""
    if not duration.endswith("s") or not duration[:-1].isdigit():
        raise ValueError(f"duration {duration!r} is not whole seconds")
    return int(duration[:-1]) * 1_000_000_000


def _healthcheck(check: Healthcheck) -> dict[str, Any]:
    return {"Test": list(check.tests), "Interval": _ns(check.interval), "Timeout": _ns(check.timeout),
            "StartPeriod": _ns(check.start_period), "StartInterval": 0, "Retries": check.retries}


def create_body(plan: SandboxPlan, *, image: str, network: str, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """`POST /containers/create` for the sandbox `plan` describes, as the provider sends it for the warm ones."""
    if any(isinstance(v, SecretRef) for v in plan.env.values()):
        raise ValueError(f"sandbox {plan.name!r}: a secret in the environment cannot go into an on-demand recipe "
                         "(rule ondemand-secret-env)")
    run = plan.run
    config: dict[str, Any] = {
        "Image": image, "Hostname": plan.hostname, "Domainname": "", "Tty": False, "OpenStdin": False,
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
        "Mounts": [*mounts, *({"Type": "volume", "Source": w.name, "Target": w.path, "ReadOnly": False}
                             for w in plan.workspaces)],
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
    body = {**config, "HostConfig": host, "NetworkingConfig": {"EndpointsConfig": {network: {}}}}
    # The recipe's own digest, without it: the runtime's reconcile tells a changed pool's containers apart by it.
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
    body["Labels"] = {**body["Labels"], LABEL_ONDEMAND: "true", LABEL_RECIPE: digest}
    return body


def plan_ondemand(*, stack: str, pool: str, host: str, template: ResolvedTemplate, replicas: int, ceiling: int,
                  network: PoolNetwork, digest: str, image: str, labels: dict[str, str], guard_state: str,
                  gpus: tuple[tuple[str, ...], ...] = (), ingress: Ingress | None = None) -> OnDemand | None:
    """The pool's recipe on one host, or None when its ceiling is its warm count."""
    if ceiling <= replicas:
        return None
    mounts = pool_mounts(stack, pool, template, guard_state)
    plans = [plan_sandbox(stack=stack, pool=pool, host=host, template=template, index=i, network=network,
                          digest=digest, labels=labels, gpu_device_ids=gpus[i] if i < len(gpus) else (),
                          ingress=ingress) for i in range(replicas, ceiling)]
    bodies = {p.name: create_body(p, image=image, network=network.name, mounts=mounts) for p in plans}
    first = next(iter(bodies.values()))
    # The digest label differs per place (names are in the body): kept per place, not shared.
    common = {key: value for key, value in first.items()
              if all(body.get(key) == value for body in bodies.values())}
    common = {**common, **{k: first[k] for k in first if k not in common and isinstance(first[k], dict)}}
    places = {name: difference(common, body) for name, body in bodies.items()}
    return OnDemand(ceiling=ceiling, common=common, places=places, wait_seconds=plans[0].wait_timeout or 60)
