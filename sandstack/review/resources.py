"""The resources `pulumi up` of a spec registers, from the plan (the same values the components register).

Each resource has the logical name and type Pulumi gives it, its parent, where it belongs (host, pool,
template) and its key settings as plain JSON values. Secret values are never known here: a secret shows
as its config key. A test checks that the names and types are exactly what the program registers under
mocks, for every stack in `stacks/`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sandstack.plan.changes import sandbox_replace_on_changes
from sandstack.plan.data import plan_data
from sandstack.plan.host import HostPlan, plan_hosts, snapshot_owners
from sandstack.plan.ingress import url_of
from sandstack.plan.sandbox import plan_sandbox
from sandstack.plan.secrets import plan_secrets
from sandstack.plan.snapshot import plan_snapshot
from sandstack.spec.models import SecretRef
from sandstack.spec.resolve import ResolvedStack, ResolvedTemplate

COMPONENT = "sandstack"  # the SandboxStack name `sandstack.program` uses
T = "sandstack:index:"
CONTAINER, NETWORK, VOLUME = "docker:index/container:Container", "docker:index/network:Network", "docker:index/volume:Volume"
REMOTE_IMAGE, REGISTRY_IMAGE = "docker:index/remoteImage:RemoteImage", "docker:index/registryImage:RegistryImage"
PROVIDER = "pulumi:providers:docker"


@dataclass(frozen=True)
class Resource:
    name: str  # Pulumi's logical name
    type: str
    parent: str | None  # the parent's key (a pool and a template may share a logical name, not a type)
    kind: str  # what a reviewer calls it: host, provider, infra image, guard, gateway, network, snapshot, ...
    host: str | None = None
    pool: str | None = None
    template: str | None = None
    props: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.type}::{self.name}"

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def _secret_or_value(value: str | SecretRef) -> Any:
    return {"secret": value.secret} if isinstance(value, SecretRef) else value


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, SecretRef):
        return {"secret": value.secret}
    return value


def _host_resources(stack_name: str, host: str, plan: HostPlan, spec) -> list[Resource]:
    base = f"{stack_name}-{host}"
    host_key, guard_key, gateway_key = f"{T}SandboxHost::{base}", f"{T}HostGuard::{base}-guard", \
        f"{T}EgressGateway::{base}-gateway"
    out = [
        Resource(base, T + "SandboxHost", f"{T}SandboxStack::{stack_name}", "host", host, props={"address": plan.address,
                                                                         "labels": plan.labels}),
        Resource(f"{base}-provider", PROVIDER, host_key, "provider", host, props={
            "endpoint": spec.endpoint, "ssh_opts": list(spec.ssh_opts),
            "tls": {k: {"secret": getattr(spec.tls, k).secret} for k in ("ca", "cert", "key")} if spec.tls else None}),
        Resource(f"{base}-infra", REMOTE_IMAGE, host_key, "infra image", host, props={
            "image": plan.infra.name, "declared": plan.infra.declared, "digest": plan.infra.digest}),
        Resource(f"{base}-guard", T + "HostGuard", host_key, "guard", host),
        Resource(f"{base}-guard-state", VOLUME, guard_key, "guard state", host,
                 props={"name": plan.guard.state_volume}),
        Resource(f"{base}-guard-container", CONTAINER, guard_key, "guard", host, props={
            "name": plan.guard.container_name, "rules": list(plan.guard.rules), "bridges": list(plan.guard.bridges),
            "pids": {name: limit for name, limit in plan.guard.pids}, "lifecycle": list(plan.guard.lifecycle)}),
    ]
    out += [Resource(f"{base}-ws.{w.name.removeprefix(f'sandstack-{plan.stack}-')}", VOLUME, host_key, "disk workspace",
                     host, props={"name": w.name, "sandbox": w.sandbox, "path": w.path, "size": w.size, "exec": w.exec,
                                  "seed": w.seed}) for w in plan.workspaces]
    for pool, net in plan.networks.items():
        out.append(Resource(f"{base}-net.{pool}", NETWORK, host_key, "network", host, pool, props={
            "name": net.name, "bridge": net.bridge, "subnet": str(net.subnet), "internal": net.internal,
            "outbound": net.outbound, "gateway_port": net.gateway_port}))
    if plan.gateway:
        out += [
            Resource(f"{base}-egress-net", NETWORK, host_key, "egress network", host,
                     props={"name": plan.egress_network, "bridge": plan.egress_bridge}),
            Resource(f"{base}-gateway", T + "EgressGateway", host_key, "gateway", host),
            Resource(f"{base}-gateway-log", VOLUME, gateway_key, "gateway log", host,
                     props={"name": plan.gateway.log_volume}),
            Resource(f"{base}-gateway-container", CONTAINER, gateway_key, "gateway", host, props={
                "name": plan.gateway.container_name,
                "pools": {p.pool: {"port": p.port, "address": p.address} for p in plan.gateway.pools},
                "squid_conf": plan.gateway.config}),
        ]
    if plan.logger:
        logger_key = f"{T}ConnectionLogger::{base}-logger"
        out += [
            Resource(f"{base}-logger", T + "ConnectionLogger", host_key, "connection logger", host),
            Resource(f"{base}-logger-log", VOLUME, logger_key, "connection log", host,
                     props={"name": plan.logger.log_volume}),
            Resource(f"{base}-logger-container", CONTAINER, logger_key, "connection logger", host, props={
                "name": plan.logger.container_name, "queue": plan.logger.group,
                "logged_pools": list(plan.logger.pools),
                # Each logged pool's resolver (its address, then its dnsmasq options) and the upstream servers.
                "resolvers": {r.pool: [r.address, *r.options] for r in plan.logger.resolvers},
                "upstream": list(plan.logger.upstream)}),
        ]
    if plan.runtime:
        runtime_key, config = f"{T}RuntimeService::{base}-runtime", plan.runtime.config
        out += [
            Resource(f"{base}-runtime", T + "RuntimeService", host_key, "runtime", host),
            Resource(f"{base}-runtime-state", VOLUME, runtime_key, "runtime state", host,
                     props={"name": plan.runtime.state_volume}),
            Resource(f"{base}-runtime-container", CONTAINER, runtime_key, "runtime", host, props={
                "name": plan.runtime.container_name, "listen": f"{config.listen}:{config.port}",
                "token": {"secret": plan.runtime.spec.token.secret},
                "pools": {pool: {"sandboxes": len(p.sandboxes), "workspace": p.workspace_root,
                                 "idle": f"{p.idle.action} after {p.idle.after_seconds}s" if p.idle else None}
                          for pool, p in config.pools.items()}}),
        ]
    if plan.ingress:
        ingress_key = f"{T}IngressProxy::{base}-ingress"
        out += [
            Resource(f"{base}-ingress", T + "IngressProxy", host_key, "ingress", host),
            Resource(f"{base}-ingress-net", NETWORK, ingress_key, "ingress network", host,
                     props={"name": plan.ingress.network, "bridge": plan.ingress.bridge}),
            *([Resource(f"{base}-ingress-data", VOLUME, ingress_key, "ingress data", host,
                        props={"name": plan.ingress.data_volume})] if plan.ingress.spec.acme_email else []),
            Resource(f"{base}-ingress-container", CONTAINER, ingress_key, "ingress", host, props={
                "name": plan.ingress.container_name, "domain": plan.ingress.spec.domain,
                "listen": f"{plan.ingress.bind_ip}:{plan.ingress.spec.port}",
                "tls": ({k: {"secret": getattr(plan.ingress.spec.tls, k).secret} for k in ("cert", "key")}
                        if plan.ingress.spec.tls else "acme" if plan.ingress.spec.acme_email else "local CA"),
                "sites": {site.host_name: f"{site.upstream}:{site.port}" for site in plan.ingress.sites}}),
        ]
    return out


def _template_resources(stack_name: str, stack: str, host: str, template: ResolvedTemplate) -> list[Resource]:
    snap = plan_snapshot(template, stack)
    base = f"{stack_name}-{template.name}.{host}"
    key = f"{T}SandboxTemplate::{base}"
    out = [
        Resource(base, T + "SandboxTemplate", f"{T}SandboxHost::{stack_name}-{host}", "template", host, template=template.name),
        Resource(f"{base}-image", REMOTE_IMAGE, key, "snapshot", host, template=template.name, props={
            "image": snap.image, "version": template.snapshot_version, "digest": snap.digest,
            "base_image": template.base_image, "setup": list(template.setup),
            "files": [{"path": f.path, "mode": f.mode, "source": f.source.name} for f in template.files]}),
    ]
    if template.push_to:
        out.append(Resource(f"{base}-push", REGISTRY_IMAGE, key, "snapshot push", host, template=template.name,
                            props={"image": snap.image}))
    return out


def _pool_resources(stack_name: str, stack: str, host: str, pool: str, replicas: int, template: ResolvedTemplate,
                    plan: HostPlan, owner: ResolvedTemplate) -> list[Resource]:
    base = f"{stack_name}-{pool}.{host}"
    digest = plan_snapshot(template, stack).digest
    key = f"{T}SandboxPool::{base}"
    out = [Resource(base, T + "SandboxPool", f"{T}SandboxHost::{stack_name}-{host}", "pool", host, pool, template.name,
                    props={"replicas": replicas})]
    secrets = plan_secrets(stack, pool, template)
    if secrets:
        files = {s.path: {"secret": s.secret} for s in template.secrets}
        out += [
            Resource(f"{base}-secrets", VOLUME, key, "secrets volume", host, pool, template.name,
                     props={"name": secrets.volume}),
            Resource(f"{base}-secrets-seeder", CONTAINER, key, "secrets seeder", host, pool, template.name,
                     props={"name": secrets.seeder_name, "owner": template.user, "files": files}),
        ]
    data = plan_data(stack, pool, template)
    if data:
        out += [Resource(f"{base}-data{i}", VOLUME, key, "data volume", host, pool, template.name,
                         props={"name": v.name, "path": v.path}) for i, v in enumerate(data.volumes)]
        out.append(Resource(f"{base}-data-seeder", CONTAINER, key, "data loader", host, pool, template.name,
                            props={"name": data.seeder_name, "files": data.files}))
    image = plan_snapshot(owner, stack).image  # the shared image of identical snapshots
    for index in range(replicas):
        sandbox = plan_sandbox(stack=stack, pool=pool, host=host, template=template, index=index,
                               network=plan.networks[pool], digest=digest, labels=plan.labels,
                               gpu_device_ids=plan.gpu_ids(pool, index),
                               ingress=plan.ingress.spec if plan.ingress else None)
        props = _jsonable(asdict(sandbox))
        props["env"] = {k: _secret_or_value(v) for k, v in sandbox.env.items()}
        ingress = plan.ingress.spec if plan.ingress else None
        props.update(image=image, network=plan.networks[pool].name, egress=_egress(template),
                     lifecycle=asdict(template.lifecycle), pids=template.limits.pids, replace_on_changes=sandbox_replace_on_changes(),
                     secret_files={s.path: s.secret for s in sorted(template.secrets, key=lambda s: s.path)},
                     urls={str(p.port): url_of(ingress, pool, index, p.port)
                           for p in template.ports if p.exposure == "url" and ingress},
                     data=[d.path for d in template.data])
        out.append(Resource(f"{base}-{index}", CONTAINER, key, "sandbox", host, pool, template.name, props))
    return out


def _egress(template: ResolvedTemplate) -> dict[str, Any]:
    n = template.network
    return {"mode": n.egress, "outbound": n.outbound, "log": n.log, "allow": [str(r) for r in n.allow],
            "deny": [str(r) for r in n.deny], "allow_metadata": n.allow_metadata}


def stack_resources(spec: ResolvedStack, stack: str, component: str = COMPONENT) -> list[Resource]:
    """Every resource of the spec, in registration order: the stack, then per host its own objects, its
    templates' snapshot images and its pools' objects."""
    out = [Resource(component, T + "SandboxStack", None, "stack")]
    hosts = plan_hosts(spec, stack)
    owners = snapshot_owners(spec)
    for host, plan in hosts.items():
        out += _host_resources(component, host, plan, spec.hosts[host])
        seen: set[str] = set()
        for pool_name, pool in spec.pools.items():
            if host not in pool.hosts:
                continue
            template = spec.templates[pool.template]
            owner = spec.templates[owners[(host, template.name)]]
            if owner.name not in seen:
                seen.add(owner.name)
                out += _template_resources(component, stack, host, owner)
            out += _pool_resources(component, stack, host, pool_name, pool.replicas, template, plan, owner)
    return out
