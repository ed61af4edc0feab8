"""One host's plan: its labels and address, its infra image, one network per pool placed on it, the
guard that closes it to its sandboxes, and the gateway of its gateway pools. Pure values; SandboxHost
only turns them into resources."""

from __future__ import annotations

__all__ = ["HostPlan", "InfraImagePlan", "Placement", "placements_by_host", "plan_host", "plan_hosts",
           "snapshot_owners"]

import hashlib
import ipaddress
from dataclasses import dataclass

from sandstack.plan.gateway import GATEWAY_PIDS, GatewayPlan, plan_gateway
from sandstack.plan.guard import GuardPlan, plan_guard
from sandstack.plan.ingress import IngressPlan, Site, Wake, wake_token_label
from sandstack.plan.logger import LoggerPlan, Resolver
from sandstack.plan.resolver import GATEWAY_RESOLVER, gateway_options
from sandstack.plan.runtime_host import RuntimeHostPlan, plan_runtime
from sandstack.plan.naming import bridge_name, egress_network_name, labels
from sandstack.plan.addresses import allocate
from sandstack.plan.network import (
    PoolNetwork,
    egress_bridge_rules,
    ingress_bridge_rules,
    gateway_refused,
    guard_rules,
    log_queue,
    plan_pool_network,
)
from sandstack.plan.ondemand import plan_ondemand
from sandstack.plan.package_files import INFRA_CONTEXT
from sandstack.plan.placement import Placement, placements_by_host
from sandstack.plan.sandbox import sandbox_name
from sandstack.plan.snapshot import plan_snapshot, setup_key
from sandstack.plan.squid import GatewayPool
from sandstack.plan.workspace import WorkspaceVolume, plan_workspaces
from sandstack.spec.addresses import HostLock, host_needs
from sandstack.spec.models import Host
from sandstack.spec.resolve import ResolvedStack


@dataclass(frozen=True)
class InfraImagePlan:
    """The image the guard, gateway and secrets seeders run: declared by the host, or built from the package."""

    name: str
    declared: bool
    digest: str | None  # of the packaged Dockerfile, when sandstack builds it


@dataclass(frozen=True)
class HostPlan:
    stack: str
    host: str
    labels: dict[str, str]
    address: str
    infra: InfraImagePlan
    networks: dict[str, PoolNetwork]  # by pool
    egress_bridge: str | None  # the gateway's way out, when the host has a gateway
    guard: GuardPlan
    gateway: GatewayPlan | None
    gpus: dict[str, tuple[tuple[str, ...], ...]]  # pool → each replica's GPU device ids
    workspaces: tuple[WorkspaceVolume, ...] = ()  # every sandbox's disk workspaces, made before the guard
    ingress: IngressPlan | None = None
    runtime: RuntimeHostPlan | None = None
    logger: LoggerPlan | None = None
    egress_subnet: ipaddress.IPv4Network | None = None  # fixed: the gateway's resolver is on its bridge address

    def gpu_ids(self, pool: str, index: int) -> tuple[str, ...]:
        return self.gpus[pool][index] if pool in self.gpus else ()

    @property
    def egress_network(self) -> str | None:
        return egress_network_name(self.stack) if self.egress_bridge else None

    @property
    def runtime_url(self) -> str | None:
        """Where an agent platform reaches the host's runtime: its loopback unless the runtime is public."""
        if self.runtime is None:
            return None
        where = self.address if self.runtime.spec.exposure == "public" else "127.0.0.1"
        return f"http://{where}:{self.runtime.spec.port}"


def snapshot_owners(spec: ResolvedStack) -> dict[tuple[str, str], str]:
    """(host, template) → the template whose snapshot image it uses there: templates whose snapshot content
    (the build digest), push target and setup policy are the same build one image per host, named after the first."""
    out: dict[tuple[str, str], str] = {}
    for host, placements in placements_by_host(spec).items():
        first: dict[tuple[str, str | None, str | None], str] = {}
        for p in placements:
            key = (plan_snapshot(p.template, "").digest, p.template.push_to, setup_key(p.template))
            out[(host, p.template.name)] = first.setdefault(key, p.template.name)
    return out


def plan_hosts(spec: ResolvedStack, stack: str) -> dict[str, HostPlan]:
    """Every host's plan, by host name, in spec order; its addresses kept from the spec's lock where it has one."""
    owners = snapshot_owners(spec)
    return {host: plan_host(stack, host, spec.hosts[host], placements,
                            {p.pool: plan_snapshot(spec.templates[owners[(host, p.template.name)]], stack).image
                             for p in placements},
                            spec.addresses.hosts.get(host) if spec.addresses else None)
            for host, placements in placements_by_host(spec).items()}


def host_address(endpoint: str) -> str:
    """Where clients reach the host's public ports: the endpoint's host name, or localhost for a socket."""
    if endpoint.startswith("unix://"):
        return "localhost"
    rest = endpoint.split("://", 1)[1].rsplit("@", 1)[-1]
    return rest.rsplit(":", 1)[0] if ":" in rest else rest


def host_gpu_ids(spec: Host) -> list[tuple[str, str]]:
    """(type, device id) of each of the host's GPUs, in declaration order; undeclared ids are indexes."""
    out, offset = [], 0
    for inventory in spec.capacity.gpus:
        ids = inventory.ids or [str(offset + i) for i in range(inventory.count)]
        offset += inventory.count
        out += [(inventory.type, device) for device in ids]
    return out


def assign_gpus(spec: Host, placements: list[Placement]) -> dict[str, tuple[tuple[str, ...], ...]]:
    """Each replica's own devices of the type it requests, first free first, pools in spec order (rule
    gpu-host has checked that they fit)."""
    free = host_gpu_ids(spec)
    out: dict[str, tuple[tuple[str, ...], ...]] = {}
    for p in placements:
        request = p.template.limits.gpus
        if request is None:
            continue
        replicas = []
        for _ in range(p.places):  # on-demand places too: each has its devices, as the places were counted
            picked = [device for kind, device in free if request.type in (None, kind)][:request.count]
            free = [(kind, device) for kind, device in free if device not in picked]
            replicas.append(tuple(picked))
        out[p.pool] = tuple(replicas)
    return out


def plan_infra_image(stack: str, spec: Host) -> InfraImagePlan:
    if spec.infra_image:
        return InfraImagePlan(spec.infra_image, True, None)
    digest = hashlib.sha256((INFRA_CONTEXT / "Dockerfile").read_bytes()).hexdigest()
    # '_' keeps it apart from the stack's snapshot images, `sandstack-<stack>/<template>`.
    return InfraImagePlan(f"sandstack-{stack}/sandstack_infra:{digest[:12]}", False, digest)


def plan_ingress(stack: str, spec: Host, placements: list[Placement],
                 networks: dict[str, PoolNetwork], wake: Wake | None = None) -> IngressPlan | None:
    """The host's ingress, when it declares one: a site per url port of each sandbox, on its pool's network; with
    `wake` (a runtime on the host), a site without upstream wakes its sandbox."""
    if spec.ingress is None:
        return None
    sites, pools, joins = [], [], []
    for p in placements:
        net = networks[p.pool]
        if not net.url_ports:
            continue
        pools.append((p.pool, net.ingress_ip))
        joins.append((net.name, net.ingress_ip))
        for i in range(p.places):  # an on-demand place's site answers once the runtime made it
            sites += [Site(f"{port}-{p.pool}-{i}.{spec.ingress.domain}", sandbox_name(stack, p.pool, i), port,
                           auth=p.template.url_auth == "session" and wake is not None)
                      for port in net.url_ports]
    return IngressPlan(stack, spec.ingress, tuple(pools), tuple(sites), wake, tuple(joins))


def plan_logger(stack: str, spec: Host, networks: dict[str, PoolNetwork],
                gateway: GatewayPlan | None = None) -> LoggerPlan | None:
    """The host's connection logger and logging resolvers, when a pool on it is logged (every mode but deny-all
    and unlogged allow-all): its connections when it has `protocols: any`, its lookups in any case, and the
    gateway's lookups (every gateway pool is logged)."""
    resolved = [net for net in networks.values() if net.resolver]
    if not resolved:
        return None
    resolvers = [Resolver(n.pool, n.resolver, n.resolver_options) for n in resolved]
    if gateway and gateway.resolver:
        resolvers.append(Resolver(GATEWAY_RESOLVER, gateway.resolver,
                                  gateway_options([p.network for p in gateway.pools])))
    return LoggerPlan(stack, log_queue(stack), tuple(n.pool for n in resolved if n.log_queue is not None),
                      tuple(resolvers),
                      tuple(spec.dns_upstream),
                      tuple((n.pool, str(n.subnet)) for n in resolved if n.log_queue is not None))


def plan_host(stack: str, host: str, spec: Host, placements: list[Placement],
              images: dict[str, str] | None = None, memory: HostLock | None = None) -> HostPlan:
    """`images`: each pool's snapshot image on the host (its tag), for the runtime's on-demand recipes; `memory`: the
    host's addresses in the lock (sandstack.plan.addresses)."""
    needs = host_needs(spec, [(p.pool, p.template) for p in placements])
    addresses = allocate(stack, needs, memory)
    gateway_pools = [p.pool for p in placements if p.pool in needs.gateway_pools]
    ports, subnets, egress = addresses.ports, addresses.subnets, addresses.egress
    networks = {p.pool: plan_pool_network(stack, p.pool, p.template, ports.get(p.pool), subnets[p.pool])
                for p in placements}
    egress_bridge = bridge_name(stack, "egress") if gateway_pools else None
    rules = [rule for plan in networks.values() for rule in guard_rules(plan)]
    bridges = [plan.bridge for plan in networks.values()]
    if egress_bridge:
        opted_in = any(p.template.network.allow_metadata for p in placements if p.pool in gateway_pools)
        rules += egress_bridge_rules(egress_bridge, opted_in, str(egress[1]))
        bridges.append(egress_bridge)
    # An ingress beside a runtime reaches it to wake a site's sandbox: its network then has a fixed subnet.
    wake = Wake(addresses.ingress, wake_token_label(stack, host)) \
        if spec.runtime and addresses.ingress else None
    ingress = plan_ingress(stack, spec, placements, networks, wake)
    if ingress:
        rules += ingress_bridge_rules(ingress.bridge)
        bridges.append(ingress.bridge)
    by_pool = {p.pool: p for p in placements}
    # The subnet_pool but the egress network, which is carved from it too (what the gateway reaches there is no
    # sandbox: itself, and on a test machine the test's servers), and the host's address on it. Not each pool's
    # subnet: a new pool then leaves squid.conf as it is.
    pool_space = ipaddress.IPv4Network(spec.subnet_pool)
    host_networks = ([*sorted(map(str, pool_space.address_exclude(egress))), f"{egress[1]}/32"] if egress
                     else [spec.subnet_pool])
    gateway = plan_gateway(stack, host, [
        GatewayPool(pool, ports[pool], by_pool[pool].template.network, str(networks[pool].subnet),
                    networks[pool].gateway_ip, gateway_refused(by_pool[pool].template, host_networks),
                    networks[pool].name, by_pool[pool].template.network_profiles, by_pool[pool].template.start_profile,
                    by_pool[pool].template.name)
        for pool in gateway_pools
    ], resolver=str(egress[1]) if egress else None)
    # Every place up to the ceiling: the guard holds an on-demand sandbox's pids limit, lifecycle and disk workspaces
    # by its name before the runtime creates it, so it gets the same enforcement as a warm one.
    sandboxes = [(sandbox_name(stack, p.pool, i), p.template) for p in placements for i in range(p.places)]
    workspaces = tuple(w for name, template in sandboxes for w in plan_workspaces(stack, name, template))
    # A pool with size classes: its largest pids (a claim's own limit sits under it, sandstack.runtime.sizes).
    pids = {sandbox_name(stack, p.pool, i): p.largest_pids for p in placements for i in range(p.places)}
    if gateway:
        pids[gateway.container_name] = GATEWAY_PIDS
    host_labels = labels(stack, spec.labels, host=host)
    guard = plan_guard(stack, rules, bridges, pids, sandboxes, [w.guard_line for w in workspaces])
    gpus = assign_gpus(spec, placements)
    ondemand = {p.pool: plan_ondemand(
        stack=stack, pool=p.pool, host=host, template=p.template, replicas=p.replicas, ceiling=p.ceiling,
        hibernated=p.hibernated,
        network=networks[p.pool], digest=plan_snapshot(p.template, stack).digest, image=(images or {})[p.pool],
        labels=host_labels, guard_state=guard.state_volume, gpus=gpus.get(p.pool, ()),
        ingress=spec.ingress) for p in placements if p.places > p.replicas}
    return HostPlan(
        stack=stack, host=host, labels=host_labels, address=host_address(spec.endpoint),
        infra=plan_infra_image(stack, spec), networks=networks, egress_bridge=egress_bridge,
        guard=guard,
        gateway=gateway, gpus=gpus, workspaces=workspaces, ingress=ingress,
        runtime=plan_runtime(stack, host, spec.runtime, placements, ondemand),
        logger=plan_logger(stack, spec, networks, gateway), egress_subnet=egress,
    )

