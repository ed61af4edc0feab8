"""The resources `pulumi up` of a spec registers, from the plan (the same values the components register).

Each resource has the logical name and type Pulumi gives it, its parent, where it belongs (host, pool,
template) and its key settings as plain JSON values. Secret values are never known here: a secret shows
as its config key. A test checks that the names and types are exactly what the program registers under
mocks, for every stack in `stacks/`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from sandstack.plan.host import HostPlan
from sandstack.plan.ingress import url_of
from sandstack.plan.naming import infra_name
from sandstack.plan.stack import COMPONENT, PoolPlan, StackPlan, plan_stack
from sandstack.plan.tree import CONTAINER, NETWORK, PROVIDER, REGISTRY_IMAGE, REMOTE_IMAGE, VOLUME
from sandstack.spec.models import SecretRef
from sandstack.spec.resolve import ResolvedStack, ResolvedTemplate
from sandstack.spec.roles import HOST_ROLES, HostRoleInfo, check_complete, parts_of

__all__ = ["COMPONENT", "CONTAINER", "NETWORK", "PROVIDER", "REGISTRY_IMAGE", "REMOTE_IMAGE", "Resource", "VOLUME",
           "stack_resources"]


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


def _host_props(kind: str, plan: HostPlan, spec, node_key: str, keys) -> dict[str, Any]:
    """A host object's settings as a reviewer reads them, from its plan."""
    return HOST_PROPS[kind](plan, spec, node_key, keys)


def _workspace(plan: HostPlan, spec, node_key: str, keys) -> dict[str, Any]:
    w = next(w for w in plan.workspaces if keys.workspaces[w.name] == node_key)
    return {"name": w.name, "sandbox": w.sandbox, "path": w.path, "size": w.size, "exec": w.exec, "seed": w.seed}


def _network(plan: HostPlan, spec, node_key: str, keys) -> dict[str, Any]:
    pool = next(pool for pool, key in keys.networks.items() if key == node_key)
    net = plan.networks[pool]
    return {"name": net.name, "bridge": net.bridge, "subnet": str(net.subnet), "internal": net.internal,
            "outbound": net.outbound, "gateway_port": net.gateway_port}


def _ingress_network(plan: HostPlan, spec, node_key: str, keys) -> dict[str, Any]:
    assert plan.ingress is not None
    wake = plan.ingress.wake
    return {"name": plan.ingress.network, "bridge": plan.ingress.bridge,
            **({"subnet": str(wake.subnet)} if wake else {})}


def _config_volume(role: str) -> Callable[..., dict[str, Any]]:
    return lambda plan, spec, key, keys: {"name": infra_name(plan.stack, f"{role}-config")}


# By kind: the host's own node and its disk workspaces, and every host role's node but its container (checked
# complete against sandstack.spec.roles below).
HOST_PROPS: dict[str, Callable[..., dict[str, Any]]] = {
    "host": lambda plan, spec, key, keys: {"address": plan.address, "labels": plan.labels},
    "disk workspace": _workspace,
    "provider": lambda plan, spec, key, keys: {
        "endpoint": spec.endpoint, "ssh_opts": list(spec.ssh_opts),
        "tls": {k: {"secret": getattr(spec.tls, k).secret} for k in ("ca", "cert", "key")} if spec.tls else None},
    "infra image": lambda plan, spec, key, keys: {"image": plan.infra.name, "declared": plan.infra.declared,
                                                  "digest": plan.infra.digest},
    "guard state": lambda plan, spec, key, keys: {"name": plan.guard.state_volume},
    "network": _network,
    "egress network": lambda plan, spec, key, keys: {"name": plan.egress_network, "bridge": plan.egress_bridge},
    "gateway log": lambda plan, spec, key, keys: {"name": plan.gateway.log_volume},
    "connection log": lambda plan, spec, key, keys: {"name": plan.logger.log_volume},
    "runtime state": lambda plan, spec, key, keys: {"name": plan.runtime.state_volume},
    "ingress network": _ingress_network,
    "ingress data": lambda plan, spec, key, keys: {"name": plan.ingress.data_volume},
    "guard configuration": _config_volume("guard"),
    "gateway configuration": _config_volume("gateway"),
    "logger configuration": _config_volume("logger"),
    "ingress configuration": _config_volume("ingress"),
    "runtime configuration": _config_volume("runtime"),
}


def _container_props(kind: str, plan: HostPlan) -> dict[str, Any]:
    """A host role's container as a reviewer reads it (its component shows nothing of its own)."""
    return CONTAINER_PROPS[kind](plan)


def _guard_config(plan: HostPlan) -> dict[str, Any]:
    """What the guard enforces: its reload container delivers it (the guard takes it in place)."""
    g = plan.guard
    return {"name": infra_name(plan.stack, "guard-reload"), "configuration": g.config.digest, "rules": list(g.rules),
            "bridges": list(g.bridges), "pids": {name: limit for name, limit in g.pids},
            "lifecycle": list(g.lifecycle)}


def _gateway_config(plan: HostPlan) -> dict[str, Any]:
    """The gateway's pools and squid.conf: its reload container delivers them (the gateway takes them in place)."""
    assert plan.gateway is not None
    return {"name": infra_name(plan.stack, "gateway-reload"), "configuration": plan.gateway.config.digest,
            "pools": {p.pool: {"port": p.port, "address": p.address} for p in plan.gateway.pools},
            "squid_conf": plan.gateway.squid_conf}



def _logger(plan: HostPlan) -> dict[str, Any]:
    lg = plan.logger
    assert lg is not None
    # Each logged pool's resolver (its address, then its dnsmasq options) and the upstream servers.
    return {"name": lg.container_name, "queue": lg.group, "logged_pools": list(lg.pools),
            "resolvers": {r.pool: [r.address, *r.options] for r in lg.resolvers}, "upstream": list(lg.upstream)}


def _runtime(plan: HostPlan) -> dict[str, Any]:
    assert plan.runtime is not None
    config = plan.runtime.config
    return {"name": plan.runtime.container_name, "listen": f"{config.listen}:{config.port}",
            # The SSH endpoint (docs/design/ssh.md): on the API's address, its host key a secret.
            **({"ssh": {"listen": f"{config.listen}:{config.ssh_port}",
                        "host_key": {"secret": plan.runtime.spec.ssh.host_key.secret},
                        "forwarding": plan.runtime.spec.ssh.forwarding,
                        "max_connections_per_source": config.ssh_per_source}}
               if plan.runtime.spec.ssh and config.ssh_port is not None else {}),
            "token": {"secret": plan.runtime.spec.token.secret},
            # A scope's secret is in the container's environment; the pools it acts on are its configuration.
            **({"tokens": {scope: {"secret": t.secret} for scope, t in plan.runtime.spec.tokens.items()},
                "token_pools": {scope: list(t.pools) for scope, t in plan.runtime.spec.tokens.items()}}
               if plan.runtime.spec.tokens else {}),
            "pools": {pool: {"sandboxes": len(p.sandboxes), **({"max": p.ondemand.ceiling} if p.ondemand else {}),
                             **({"max_hibernated": p.ondemand.hibernated}
                                if p.ondemand and p.ondemand.hibernated is not None else {}),
                             "workspace": p.workspace_root,
                             "idle": f"{p.idle.action} after {p.idle.after_seconds}s" if p.idle else None}
                      for pool, p in config.pools.items()}}


def _ingress(plan: HostPlan) -> dict[str, Any]:
    ing = plan.ingress
    assert ing is not None
    return {"name": ing.container_name, "domain": ing.spec.domain, "listen": f"{ing.bind_ip}:{ing.spec.port}",
            "tls": ({k: {"secret": getattr(ing.spec.tls, k).secret} for k in ("cert", "key")}
                    if ing.spec.tls else "acme" if ing.spec.acme_email else "local CA"),
            "sites": {site.host_name: f"{site.upstream}:{site.port}" for site in ing.sites},
            # A site without upstream wakes its sandbox through the runtime, with a token derived from the
            # runtime's (shown as that token's config key, as every secret).
            **({"wake": {"runtime": ing.wake.upstream,
                         "token": {"secret": plan.runtime.spec.token.secret, "derived": "ingress-wake"}}}
               if ing.wake and plan.runtime else {})}


# By kind: every host role's container (checked complete against sandstack.spec.roles below).
CONTAINER_PROPS: dict[str, Callable[[HostPlan], dict[str, Any]]] = {
    "guard": lambda plan: {"name": plan.guard.container_name},
    "guard reload": _guard_config,
    "gateway": lambda plan: {"name": plan.gateway.container_name},  # type: ignore[union-attr]
    "gateway reload": _gateway_config,
    "connection logger": _logger,
    # What it serves, as its reload container delivers it (the container above shows the same: what a restart stops).
    "logger reload": lambda plan: {**_logger(plan), "name": infra_name(plan.stack, "logger-reload"),
                                   "configuration": plan.logger.config.digest},  # type: ignore[union-attr]
    "runtime": _runtime,
    # Its pools and token scopes, as its reload container delivers them (the container above shows them: what it serves).
    "runtime reload": lambda plan: {**_runtime(plan), "name": infra_name(plan.stack, "runtime-reload"),
                                    "configuration": plan.runtime.config_set.digest},  # type: ignore[union-attr]
    "ingress": _ingress,
    # Its sites and domain, as its reload container delivers them (the container above shows them: what it serves).
    "ingress reload": lambda plan: {**_ingress(plan), "name": infra_name(plan.stack, "ingress-reload"),
                                    "configuration": plan.ingress.config.digest},  # type: ignore[union-attr]
}


def check_roles(roles: dict[str, HostRoleInfo] = HOST_ROLES) -> None:
    """Every host role's node has what a reviewer reads of it (a role without it is refused, not shown empty)."""
    parts = parts_of(roles)
    check_complete("sandstack.review.resources.CONTAINER_PROPS", CONTAINER_PROPS,
                   {kind for kind, part in parts.items() if part.resource == "container"})
    check_complete("sandstack.review.resources.HOST_PROPS", HOST_PROPS,
                   {kind for kind, part in parts.items() if part.resource != "container"},
                   others=frozenset({"host", "disk workspace"}))


check_roles()


def _template_props(kind: str, node_key: str, plan: StackPlan) -> dict[str, Any]:
    snap = plan.snapshots.get(node_key)
    if snap is None:  # the template's component: its image shows the snapshot
        return {}
    if kind == "snapshot":
        template = plan.build_contexts[node_key]
        return {"image": snap.image, "version": template.snapshot_version, "digest": snap.digest,
                "base_image": template.base_image, "setup": list(template.setup),
                "files": [{"path": f.path, "mode": f.mode, "source": f.source.name} for f in template.files],
                **({"platform": template.platform} if template.platform else {}),
                **({"setup_egress": _setup_egress(template, plan.nodes[node_key].inputs["build"])}
                   if template.setup else {})}
    if kind == "snapshot push":
        return {"image": snap.image}
    return {}


def _pool_props(kind: str, node_key: str, pool: PoolPlan, plan: StackPlan) -> dict[str, Any]:
    template = pool.template
    if kind == "pool":
        # The ceiling only where it is above the warm count: a pool without on demand reads as before.
        # Size classes likewise, each as a claim of it gets it.
        return {"replicas": pool.replicas, **({"max": pool.ceiling} if pool.ceiling > pool.replicas else {}),
                **({"max_hibernated": pool.hibernated} if pool.hibernated is not None else {}),
                **({"sizes": {name: {"cpus": l.cpus, "memory": l.memory, "disk": l.disk, "pids": l.pids}
                              for name, l in pool.sizes}} if pool.sizes else {})}
    if kind == "secrets volume" and pool.secrets:
        return {"name": pool.secrets.volume}
    if kind == "secrets seeder" and pool.secrets:
        return {"name": pool.secrets.seeder_name, "owner": template.user,
                "files": {s.path: {"secret": s.secret} for s in template.secrets}}
    if kind == "data volume":
        v = pool.data_volumes[node_key]
        return {"name": v.name, "path": v.path}
    if kind == "data loader" and pool.data:
        return {"name": pool.data.seeder_name, "files": pool.data.files}
    index = pool.sandboxes.index(node_key)
    sandbox = pool.sandbox_plans[index]
    props = _jsonable(asdict(sandbox))
    if props["platform"] is None:  # only where declared: a sandbox without one reads as before the field
        del props["platform"]
    props["env"] = {k: _secret_or_value(v) for k, v in sandbox.env.items()}
    image = plan.nodes[pool.image].inputs["name"]  # the shared image of identical snapshots
    props.update(image=image, network=pool.network.name, egress=_egress(template),
                 lifecycle=asdict(template.lifecycle), pids=template.limits.pids,
                 replace_on_changes=list(plan.nodes[node_key].options.replace_on_changes),
                 secret_files={s.path: s.secret for s in sorted(template.secrets, key=lambda s: s.path)},
                 urls={str(p.port): url_of(pool.ingress, pool.pool, index, p.port)
                       for p in template.ports if p.exposure == "url" and pool.ingress},
                 data=[d.path for d in template.data])
    return props


def _egress(template: ResolvedTemplate) -> dict[str, Any]:
    n = template.network
    return {"mode": n.egress, "outbound": n.outbound, "log": n.log, "allow": [str(r) for r in n.allow],
            "deny": [str(r) for r in n.deny], "allow_metadata": n.allow_metadata}


def _setup_egress(template: ResolvedTemplate, build: dict[str, Any]) -> dict[str, Any]:
    """What the build's setup steps reach, and on which network (docs/design/setup-policy.md)."""
    policy = template.setup_policy
    if policy is None:
        return {"mode": "none"}
    return {"mode": policy.egress, "outbound": policy.outbound, "log": policy.log,
            "allow": [str(r) for r in policy.allow], "deny": [str(r) for r in policy.deny],
            "profile": template.start_profile, "network": build["network_mode"]}


POOL_KINDS = {"pool", "secrets volume", "secrets seeder", "data volume", "data loader", "sandbox"}


def _review_order(plan: StackPlan) -> list[str]:
    """The plan's nodes in registration order, but a host's disk workspaces after its guard (which depends on
    them to register first), as reviewers read a host: what closes it, then what it holds."""
    keys = list(plan.nodes)
    for host_keys in plan.host_keys.values():
        workspaces = [k for k in keys if k in set(host_keys.workspaces.values())]
        if not workspaces:
            continue
        keys = [k for k in keys if k not in workspaces]
        at = keys.index(host_keys.guard) + 1
        keys[at:at] = workspaces
    return keys


def stack_resources(spec: ResolvedStack, stack: str, component: str = COMPONENT,
                    plan: StackPlan | None = None) -> list[Resource]:
    """Every resource of the spec: the plan's nodes (sandstack.plan.stack; given, or planned here), each with what
    a reviewer calls it and its key settings."""
    plan = plan or plan_stack(spec, stack, component)
    pools = {(p.pool, p.host): p for p in plan.pools.values()}
    out = []
    for key in _review_order(plan):
        node, about = plan.nodes[key], plan.about[key]
        host = plan.hosts.get(about.host) if about.host else None
        if about.kind in POOL_KINDS:
            props = _pool_props(about.kind, key, pools[(about.pool, about.host)], plan)
        elif about.template is not None:
            props = _template_props(about.kind, key, plan)
        elif host is None:
            props = {}
        elif node.type == CONTAINER:
            props = _container_props(about.kind, host)
        elif node.custom or about.kind == "host":
            props = _host_props(about.kind, host, spec.hosts[about.host], key, plan.host_keys[about.host])
        else:
            props = {}
        out.append(Resource(node.name, node.type, node.parent, about.kind, about.host, about.pool, about.template,
                            props))
    return out
