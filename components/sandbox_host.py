"""SandboxHost: one Docker host, its provider, its networks, its egress gateway and its guard."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pulumi
import pulumi_docker as docker

from sandstack.components.egress_gateway import GATEWAY_PIDS, EgressGateway, EgressGatewayArgs
from sandstack.components.host_guard import HostGuard, HostGuardArgs, lifecycle_line
from sandstack.plan.package_files import INFRA_CONTEXT
from sandstack.plan.naming import bridge_name, egress_network_name, infra_name, labels
from sandstack.components.resource_args import network_labels
from sandstack.plan.network import (
    PoolNetwork,
    egress_bridge_rules,
    gateway_ports,
    gateway_refused,
    guard_rules,
    outbound_of,
    plan_pool_network,
    pool_subnets,
)
from sandstack.components.sandbox_pool import sandbox_name
from sandstack.components.secrets import secret_value
from sandstack.plan.squid import GatewayPool
from sandstack.spec.models import Host
from sandstack.spec.resolve import ResolvedTemplate


@dataclass(frozen=True)
class Placement:
    """A pool's share of one host: which template, how many sandboxes."""

    pool: str
    template: ResolvedTemplate
    replicas: int


@dataclass(frozen=True)
class SandboxHostArgs:
    stack: str
    host: str
    spec: Host
    placements: list[Placement]


def host_address(endpoint: str) -> str:
    """Where clients reach the host's public ports: the endpoint's host name, or localhost for a socket."""
    if endpoint.startswith("unix://"):
        return "localhost"
    rest = endpoint.split("://", 1)[1].rsplit("@", 1)[-1]
    return rest.rsplit(":", 1)[0] if ":" in rest else rest


def _bridge_options(bridge: str, *, icc: bool = False) -> dict[str, str]:
    # Without icc, containers on one bridge cannot talk to each other; the guard opens only the gateway port.
    return {"com.docker.network.bridge.name": bridge, "com.docker.network.bridge.enable_icc": str(icc).lower()}


class SandboxHost(pulumi.ComponentResource):
    provider: docker.Provider
    infra_image: pulumi.Output[str]
    networks: dict[str, docker.Network]
    plans: dict[str, PoolNetwork]

    def __init__(self, name: str, args: SandboxHostArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("sandstack:index:SandboxHost", name, None, opts)
        spec = args.spec
        self.labels = labels(args.stack, spec.labels, host=args.host)
        self.address = host_address(spec.endpoint)

        # The daemon connection every child of this host uses; TLS material only ever from secrets.
        self.provider = docker.Provider(
            f"{name}-provider",
            host=spec.endpoint,
            ssh_opts=list(spec.ssh_opts) or None,
            ca_material=secret_value(spec.tls.ca.secret) if spec.tls else None,
            cert_material=secret_value(spec.tls.cert.secret) if spec.tls else None,
            key_material=secret_value(spec.tls.key.secret) if spec.tls else None,
            opts=pulumi.ResourceOptions(parent=self),
        )
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        self.child_opts = pulumi.ResourceOptions(parent=self, providers=[self.provider])

        self.infra = self._infra_image(name, args, child)
        self.infra_image = self.infra.image_id

        gateway_pools = [p.pool for p in args.placements if outbound_of(p.template) == "gateway"]
        ports = gateway_ports(args.stack, gateway_pools)
        subnets = pool_subnets(args.stack, [p.pool for p in args.placements], spec.subnet_pool)
        self.plans = {
            p.pool: plan_pool_network(args.stack, p.pool, p.template, ports.get(p.pool), subnets[p.pool])
            for p in args.placements
        }
        egress_bridge = bridge_name(args.stack, "egress") if gateway_pools else None
        rules = [rule for plan in self.plans.values() for rule in guard_rules(plan)]
        sandboxes = [(sandbox_name(args.stack, p.pool, i), p.template)
                     for p in args.placements for i in range(p.replicas)]
        bridges = [plan.bridge for plan in self.plans.values()]
        if egress_bridge:
            opted_in = any(p.template.network.allow_metadata for p in args.placements if p.pool in gateway_pools)
            rules += egress_bridge_rules(egress_bridge, opted_in)
            bridges.append(egress_bridge)

        # Closes the host to every sandbox on it and sets each sandbox's pids limit before it starts.
        # Created first and deleted last: the networks depend on it, so on `pulumi destroy` it stops
        # after they are gone and then removes its rules.
        self.guard = HostGuard(
            f"{name}-guard",
            HostGuardArgs(
                stack=args.stack,
                image=self.infra_image,
                rules=rules,
                bridges=bridges,
                pids={
                    **{name: template.limits.pids for name, template in sandboxes},
                    **({infra_name(args.stack, "gateway"): GATEWAY_PIDS} if gateway_pools else {}),
                },
                lifecycle=[line for name, template in sandboxes if (line := lifecycle_line(name, template))],
                labels=self.labels,
            ),
            opts=self.child_opts,
        )
        after_guard = pulumi.ResourceOptions(parent=self, provider=self.provider, depends_on=[self.guard.container])
        # A network's name is fixed per pool, so a replacement (e.g. a new subnet) must delete the old one
        # first; Pulumi then replaces the sandboxes on it too.
        pool_network_opts = pulumi.ResourceOptions.merge(after_guard, pulumi.ResourceOptions(delete_before_replace=True))

        self.networks = {}
        for pool, plan in self.plans.items():
            # One bridge per pool: internal (no route out) unless the pool egresses directly or publishes ports.
            self.networks[pool] = docker.Network(
                f"{name}-net.{pool}",
                name=plan.name,
                internal=plan.internal,
                driver="bridge",
                options=_bridge_options(plan.bridge),
                ipam_configs=[docker.NetworkIpamConfigArgs(subnet=str(plan.subnet), gateway=plan.bridge_ip,
                                                           ip_range=plan.sandbox_range)],
                labels=network_labels({**self.labels, "sandstack.pool": pool}),
                opts=pool_network_opts,
            )

        self.gateway = None
        if egress_bridge:
            # The gateway's way out: a routed bridge that only the gateway joins.
            self.egress_network = docker.Network(
                f"{name}-egress-net",
                name=egress_network_name(args.stack),
                internal=False,
                driver="bridge",
                # Only the gateway joins it, so inter-container traffic there is the gateway's own.
                options=_bridge_options(egress_bridge, icc=True),
                labels=network_labels({**self.labels, "sandstack.role": "egress"}),
                opts=after_guard,
            )
            by_pool = {p.pool: p for p in args.placements}
            self.gateway = EgressGateway(
                f"{name}-gateway",
                EgressGatewayArgs(
                    stack=args.stack,
                    host=args.host,
                    image=self.infra_image,
                    pools=[
                        GatewayPool(pool, ports[pool], by_pool[pool].template.network, str(self.plans[pool].subnet),
                                    self.plans[pool].gateway_ip,
                                    gateway_refused(by_pool[pool].template, spec.subnet_pool))
                        for pool in gateway_pools
                    ],
                    pool_networks={pool: self.networks[pool].name for pool in gateway_pools},
                    outbound_network=self.egress_network.name,
                    labels=self.labels,
                ),
                opts=self.child_opts,
            )

        self.ready = [self.guard.container] + ([self.gateway.container] if self.gateway else [])
        self.register_outputs({
            "address": self.address,
            "infra_image": self.infra_image,
            "networks": {pool: net.name for pool, net in self.networks.items()},
            "guard": self.guard.container_name,
            "gateway": self.gateway.container_name if self.gateway else None,
        })

    def _infra_image(self, name: str, args: SandboxHostArgs, child: pulumi.ResourceOptions) -> docker.RemoteImage:
        if args.spec.infra_image:
            # A declared image is used as is (pulled by the daemon if missing) and never deleted.
            return docker.RemoteImage(f"{name}-infra", name=args.spec.infra_image, keep_locally=True, opts=child)
        dockerfile = (INFRA_CONTEXT / "Dockerfile").read_bytes()
        digest = hashlib.sha256(dockerfile).hexdigest()
        # sandstack's own gateway/guard image, built on the host from the packaged assets/infra.
        return docker.RemoteImage(
            f"{name}-infra",
            # '_' keeps it apart from the stack's snapshot images, `sandstack-<stack>/<template>`.
            name=f"sandstack-{args.stack}/sandstack_infra:{digest[:12]}",
            build=docker.RemoteImageBuildArgs(context=str(INFRA_CONTEXT), dockerfile="Dockerfile",
                                              labels=self.labels),
            triggers={"digest": digest},
            keep_locally=False,
            opts=child,
        )
