"""`plan_stack`: the whole stack as one tree of nodes (sandstack.plan.tree), computed once.

The stack component, then per host its own nodes (sandstack.plan.stack_host), its templates' snapshot images
(templates with the same snapshot content share the first one's image on a host) and its pools: secrets and data
volumes with their run-once seeders, and the sandboxes. `PoolPlan` keeps what a pool's outputs describe.
"""

from __future__ import annotations

import base64
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection

from sandstack.plan import types
from sandstack.plan.changes import sandbox_replace_on_changes
from sandstack.plan.contract import LABEL_ROLE
from sandstack.plan.data import SEED_DIR, DataPlan, DataVolume, plan_data
from sandstack.plan.host import HostPlan, plan_hosts, snapshot_owners
from sandstack.plan.network import PoolNetwork
from sandstack.plan.sandbox import SandboxPlan, plan_sandbox
from sandstack.plan.sandbox_container import SandboxContainer, pool_mounts, pulumi_inputs, sandbox_container
from sandstack.plan.secrets import SecretsPlan, plan_secrets
from sandstack.plan.snapshot import (SnapshotPlan, build_context, digests_once, image_labels, plan_snapshot,
                                     setup_build)
from sandstack.plan.stack_host import NO_NEW_PRIVILEGES, HostKeys, plan_host_nodes
from sandstack.plan.tree import (About, CONTAINER, REGISTRY_IMAGE, REMOTE_IMAGE, VOLUME, Node, Options, Ref, Secret,
                                 Tree, inputs, label_list, node_key)
from sandstack.spec.models.hosts import Ingress
from sandstack.spec.resolve import EffectiveLimits, ResolvedStack, ResolvedTemplate, pool_sizes

COMPONENT = "sandstack"  # the SandboxStack name `sandstack.program` uses
DEFAULT_BUILD_ROOT = Path(".sandstack") / "build"


@dataclass(frozen=True)
class PoolPlan:
    """A pool on one host: what its outputs describe, and its nodes' keys."""

    key: str
    pool: str
    host: str
    host_address: str
    template: ResolvedTemplate
    replicas: int
    ceiling: int  # warm and on-demand sandboxes at most (the runtime creates those above `replicas`)
    digest: str
    network: PoolNetwork
    ingress: Ingress | None
    image: str  # the snapshot image node's key
    sandboxes: tuple[str, ...]  # the sandbox nodes' keys, by replica
    containers: tuple[SandboxContainer, ...]  # each warm sandbox's container, by replica
    seeders: tuple[tuple[str, str, str], ...] = ()  # (node key, what it is, what sandboxes would miss)
    secrets: SecretsPlan | None = None  # its secrets volume and seeder, as registered
    data: DataPlan | None = None  # its data volumes and loader, as registered
    data_volumes: dict[str, DataVolume] = field(default_factory=dict)  # data volume node key → its volume
    sizes: tuple[tuple[str, EffectiveLimits], ...] = ()  # its size classes over its own limits (the review's)
    hibernated: int | None = None  # its `max_hibernated` (the review's; the host plan holds the places)

    @property
    def sandbox_plans(self) -> tuple[SandboxPlan, ...]:
        return tuple(c.settings for c in self.containers)


@dataclass
class StackPlan(Tree):
    stack: str = ""
    component: str = COMPONENT
    hosts: dict[str, HostPlan] = field(default_factory=dict)
    host_keys: dict[str, HostKeys] = field(default_factory=dict)
    pools: dict[str, PoolPlan] = field(default_factory=dict)  # by the pool component's key
    build_contexts: dict[str, ResolvedTemplate] = field(default_factory=dict)  # image node key → its template
    snapshots: dict[str, SnapshotPlan] = field(default_factory=dict)  # image and push node key → the snapshot

    @property
    def root(self) -> str:
        return node_key(types.SANDBOX_STACK, self.component)


def plan_stack(spec: ResolvedStack, stack: str, component: str = COMPONENT,
               build_root: Path = DEFAULT_BUILD_ROOT, only: Collection[tuple[str, str]] | None = None) -> StackPlan:
    """`only`: plan just these (pool, host) pools and their templates' snapshots, every host's own nodes still (a
    pool's nodes are the same as in the whole plan: policy reads one sandbox per template, not a whole stack)."""
    with digests_once():  # each template's snapshot files read once, not once per placement
        return _plan_stack(spec, stack, component, build_root, only)


def _plan_stack(spec: ResolvedStack, stack: str, component: str, build_root: Path,
                only: Collection[tuple[str, str]] | None) -> StackPlan:
    out = StackPlan(stack=stack, component=component)
    out.add(Node(component, types.SANDBOX_STACK, None), About("stack"))
    owners = snapshot_owners(spec)
    out.hosts = plan_hosts(spec, stack)
    for host, plan in out.hosts.items():
        keys = out.host_keys[host] = plan_host_nodes(out, out.root, component, host, spec.hosts[host], plan)
        images: dict[str, str] = {}
        for pool_name, pool in spec.pools.items():
            if host not in dict.fromkeys(pool.hosts) or (only is not None and (pool_name, host) not in only):
                continue
            template = spec.templates[pool.template]
            owner = spec.templates[owners[(host, template.name)]]
            if owner.name not in images:
                images[owner.name] = _template(out, keys, component, stack, host, owner, plan, build_root, pool_name)
            _pool(out, keys, component, stack, host, pool_name, pool.replicas, pool.ceiling, template, owner, plan,
                  images[owner.name], spec.hosts[host].ingress, tuple(pool_sizes(pool, template.limits).items()),
                  pool.max_hibernated)
    return out


def _template(out: StackPlan, keys: HostKeys, component: str, stack: str, host: str, template: ResolvedTemplate,
              plan: HostPlan, build_root: Path, pool: str) -> str:
    """`pool`: the first pool on the host whose sandboxes use this image, on whose network the setup steps run."""
    snapshot = plan_snapshot(template, stack)
    setup = setup_build(template, plan.networks[pool])
    # Steps on the pool's network reach its gateway and resolver: in place (the gateway and guard ready) before them.
    on_network = setup.get("network_mode") not in (None, "none")
    base = f"{component}-{template.name}.{host}"
    t = template.name
    parent = out.add(Node(base, types.SANDBOX_TEMPLATE, keys.host, keys.provider, {"tag": snapshot.tag}),
                     About("template", host, template=t)).key
    # The snapshot: base image + files + setup, run once at build time, never at sandbox start. Every build runs
    # every setup step (no_cache): with the layer cache, a bumped version got the old steps' layers back.
    image = out.add(Node(f"{base}-image", REMOTE_IMAGE, parent, keys.provider, inputs(
        name=snapshot.image, build={"context": str(build_context(build_root, template, snapshot.digest)),
                                    "dockerfile": "Dockerfile",
                                    "labels": image_labels(template, stack, plan.labels, snapshot.digest),
                                    "no_cache": True,
                                    # The build's platform: FROM takes the base image's variant for it, and
                                    # RUN steps run as it (under emulation where the host is not it).
                                    **({"platform": template.platform} if template.platform else {}),
                                    **setup},
        triggers={"digest": snapshot.digest}, keep_locally=False),
        Options(depends_on=(keys.networks[pool], *keys.ready) if on_network else ())),
        About("snapshot", host, template=t))
    out.build_contexts[image.key] = template
    out.snapshots[image.key] = snapshot
    if template.push_to:
        # Declared registry: push the same image so hosts without the build context can pull it.
        push = out.add(Node(f"{base}-push", REGISTRY_IMAGE, parent, keys.provider,
                            inputs(name=Ref(image.key, "name"), keep_remotely=True)),
                       About("snapshot push", host, template=t))
        out.snapshots[push.key] = snapshot
    return image.key


def _pool(out: StackPlan, keys: HostKeys, component: str, stack: str, host: str, pool: str, replicas: int, ceiling: int,
          template: ResolvedTemplate, owner: ResolvedTemplate, plan: HostPlan, image: str,
          ingress: Ingress | None, sizes: tuple[tuple[str, EffectiveLimits], ...] = (),
          hibernated: int | None = None) -> None:
    base = f"{component}-{pool}.{host}"
    about = functools.partial(About, host=host, pool=pool, template=template.name)
    parent = out.add(Node(base, types.SANDBOX_POOL, keys.host, keys.provider), about("pool")).key
    digest = out.snapshots[image].digest  # the owner's snapshot, planned once with its image
    waits = list(keys.ready)
    seeders = []
    # The objects a sandbox refers to, by Docker name → the nodes that make them (the pool's volumes added below).
    image_name = out.nodes[image].inputs["name"]
    node_of = {image_name: image, plan.networks[pool].name: keys.networks[pool],
               plan.guard.state_volume: keys.guard_state, **keys.workspaces}
    secrets = plan_secrets(stack, pool, template)
    if secrets:
        # One volume per pool and host, mounted read-only: even the owner cannot change its secrets (0400).
        volume = out.add(Node(f"{base}-secrets", VOLUME, parent, keys.provider,
                              inputs(name=secrets.volume, labels=label_list(plan.labels)),
                              Options(delete_before_replace=True)), about("secrets volume"))
        # Run-once seeder: `uploads` cannot write into a read-only-root sandbox, so a throwaway container with
        # only CHOWN copies the files into the volume with the sandbox user as owner, then exits.
        seeder = out.add(Node(f"{base}-{types.SECRETS_SEEDER}", CONTAINER, parent, keys.provider, inputs(
            name=secrets.seeder_name, image=Ref(keys.infra, "image_id"), network_mode="none",
            command=["sh", "-c", secrets.script],
            uploads=[{"file": u.path, "content": Secret(u.secret), "permissions": secrets.mode}
                     for u in secrets.uploads],
            mounts=[{"type": "volume", "source": Ref(volume.key, "name"), "target": secrets.seed_dir}],
            capabilities={"drops": ["ALL"], "adds": list(secrets.capability_adds)}, security_opts=NO_NEW_PRIVILEGES,
            attach=True, must_run=False, logs=True, labels=label_list({**plan.labels, LABEL_ROLE: secrets.role}))),
            about("secrets seeder"))
        waits.append(seeder.key)
        seeders.append((seeder.key, f"secrets seeder for pool '{pool}' on host '{host}'", "their secrets"))
        node_of[secrets.volume] = volume.key
    data = plan_data(stack, pool, template)
    volumes = []
    if data:
        # One volume per data mount, mounted read-only where the spec says.
        volumes = [out.add(Node(f"{base}-data{i}", VOLUME, parent, keys.provider,
                                inputs(name=v.name, labels=label_list(plan.labels)),
                                Options(delete_before_replace=True)), about("data volume"))
                   for i, v in enumerate(data.volumes)]
        # Run-once loader: the provider uploads the files (a changed file replaces only this container), it copies
        # them into the volumes, readable by every user and writable by none.
        seeder = out.add(Node(f"{base}-{types.DATA_SEEDER}", CONTAINER, parent, keys.provider, inputs(
            name=data.seeder_name, image=Ref(keys.infra, "image_id"), network_mode="none",
            command=["sh", "-c", data.script],
            uploads=[{"file": target, "content_base64": base64.b64encode(source.read_bytes()).decode()}
                     for target, source in data.uploads],
            mounts=[{"type": "volume", "source": Ref(v.key, "name"), "target": f"{SEED_DIR}/{i}"}
                    for i, v in enumerate(volumes)],
            capabilities={"drops": ["ALL"]}, security_opts=NO_NEW_PRIVILEGES, attach=True, must_run=False,
            logs=True, labels=label_list({**plan.labels, LABEL_ROLE: "data-seeder"}))), about("data loader"))
        waits.append(seeder.key)
        seeders.append((seeder.key, f"data loader for pool '{pool}' on host '{host}'", "their data"))
        node_of.update((d.name, v.key) for v, d in zip(volumes, data.volumes))
    shared = pool_mounts(stack, pool, template, plan.guard.state_volume)
    sandboxes, containers = [], []
    for index in range(replicas):
        sandbox = plan_sandbox(stack=stack, pool=pool, host=host, template=template, index=index,
                               network=plan.networks[pool], digest=digest, labels=plan.labels,
                               gpu_device_ids=plan.gpu_ids(pool, index), ingress=ingress)
        container = sandbox_container(sandbox, image=image_name, network=plan.networks[pool].name, shared=shared)
        containers.append(container)
        sandboxes.append(out.add(Node(f"{base}-{index}", CONTAINER, parent, keys.provider,
                                      pulumi_inputs(container, node_of),
                                      Options(depends_on=tuple(waits),
                                              replace_on_changes=tuple(sandbox_replace_on_changes()))),
                                      about("sandbox")).key)
    out.pools[parent] = PoolPlan(parent, pool, host, plan.address, template, replicas, ceiling, digest,
                                 plan.networks[pool], ingress, image, tuple(sandboxes), tuple(containers),
                                 tuple(seeders), secrets, data,
                                 {v.key: d for v, d in zip(volumes, data.volumes)} if data else {}, sizes,
                                 hibernated)

