"""SandboxHost: one Docker host, its provider, its networks, its egress gateway and its guard.

Everything it registers is its plan (sandstack/plan/host.py: `plan_host`); this component only turns that
plan into resources and wires Pulumi's outputs (network names, the infra image id) between them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_docker as docker

from sandstack.components.egress_gateway import EgressGateway, EgressGatewayArgs
from sandstack.components.host_guard import HostGuard, HostGuardArgs
from sandstack.components.connection_logger import ConnectionLogger, ConnectionLoggerArgs
from sandstack.components.ingress_proxy import IngressProxy, IngressProxyArgs
from sandstack.components.runtime_service import RuntimeService, RuntimeServiceArgs
from sandstack.components.resource_args import bridge_options, network_labels, volume_labels
from sandstack.components.secrets import secret_value
from sandstack.plan import types
from sandstack.plan.contract import LABEL_POOL, LABEL_ROLE
from sandstack.plan.host import HostPlan, Placement, plan_host
from sandstack.plan.package_files import INFRA_CONTEXT
from sandstack.spec.models import Host

__all__ = ["Placement", "SandboxHost", "SandboxHostArgs"]


@dataclass(frozen=True)
class SandboxHostArgs:
    stack: str
    host: str
    spec: Host
    placements: list[Placement]


class SandboxHost(pulumi.ComponentResource):
    provider: docker.Provider
    infra_image: pulumi.Output[str]
    networks: dict[str, docker.Network]
    plan: HostPlan

    def __init__(self, name: str, args: SandboxHostArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(types.SANDBOX_HOST, name, None, opts)
        spec = args.spec
        self.plan = plan = plan_host(args.stack, args.host, spec, args.placements)
        self.plans = plan.networks
        self.labels = plan.labels
        self.address = plan.address

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

        self.infra = self._infra_image(name, child)
        self.infra_image = self.infra.image_id

        # Each sandbox's disk workspaces: volumes whose filesystems the guard makes and attaches, so they exist
        # before it (it is healthy only once every one is attachable) and outlive it (data survives a renewal).
        # Replaced delete-first: the name is explicit, so a create-first replacement would be deleted with the old.
        replace_first = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(delete_before_replace=True))
        self.workspaces = {
            w.name: docker.Volume(
                f"{name}-ws.{w.name.removeprefix(f'sandstack-{args.stack}-')}", name=w.name, driver="local",
                driver_opts=w.driver_opts, labels=volume_labels({**self.labels, LABEL_ROLE: "workspace"}),
                opts=replace_first)
            for w in plan.workspaces
        }
        self.workspace_volumes = {docker_name: volume.name for docker_name, volume in self.workspaces.items()}

        # Closes the host to every sandbox on it and sets each sandbox's pids limit before it starts.
        # Created first and deleted last: the networks depend on it, so on `pulumi destroy` it stops
        # after they are gone and then removes its rules.
        self.guard = HostGuard(f"{name}-guard", HostGuardArgs(plan.guard, self.infra_image, self.labels),
                               opts=pulumi.ResourceOptions.merge(self.child_opts, pulumi.ResourceOptions(
                                   depends_on=list(self.workspaces.values()))))
        after_guard = pulumi.ResourceOptions(parent=self, provider=self.provider, depends_on=[self.guard.container])
        # A network's name is fixed per pool, so a replacement (e.g. a new subnet) must delete the old one
        # first; Pulumi then replaces the sandboxes on it too.
        pool_network_opts = pulumi.ResourceOptions.merge(after_guard, pulumi.ResourceOptions(delete_before_replace=True))

        self.networks = {}
        for pool, net in plan.networks.items():
            # One bridge per pool: internal (no route out) unless the pool egresses directly or publishes ports.
            self.networks[pool] = docker.Network(
                f"{name}-net.{pool}",
                name=net.name,
                internal=net.internal,
                driver="bridge",
                options=bridge_options(net.bridge),
                ipam_configs=[docker.NetworkIpamConfigArgs(subnet=str(net.subnet), gateway=net.bridge_ip,
                                                           ip_range=net.sandbox_range)],
                labels=network_labels({**self.labels, LABEL_POOL: pool}),
                opts=pool_network_opts,
            )

        self.gateway = None
        if plan.gateway and plan.egress_bridge:
            # The gateway's way out: a routed bridge that only the gateway joins.
            self.egress_network = docker.Network(
                f"{name}-egress-net",
                name=plan.egress_network,
                internal=False,
                driver="bridge",
                # Only the gateway joins it, so inter-container traffic there is the gateway's own.
                options=bridge_options(plan.egress_bridge, icc=True),
                # A fixed subnet: the gateway's logging resolver listens on its bridge address.
                ipam_configs=[docker.NetworkIpamConfigArgs(subnet=str(plan.egress_subnet),
                                                           gateway=str(plan.egress_subnet[1]))]
                if plan.egress_subnet else None,
                labels=network_labels({**self.labels, LABEL_ROLE: "egress"}),
                opts=after_guard,
            )
            self.gateway = EgressGateway(
                f"{name}-gateway",
                EgressGatewayArgs(
                    plan=plan.gateway,
                    image=self.infra_image,
                    pool_networks={p.pool: self.networks[p.pool].name for p in plan.gateway.pools},
                    outbound_network=self.egress_network.name,
                    labels=self.labels,
                ),
                opts=self.child_opts,
            )

        self.ingress = None
        if plan.ingress:
            # The host's URLs: a reverse proxy on the pool networks with url ports, after the guard closed them.
            self.ingress = IngressProxy(
                f"{name}-ingress",
                IngressProxyArgs(plan=plan.ingress, image=self.infra_image,
                                 pool_networks={pool: self.networks[pool].name for pool, _ in plan.ingress.pools},
                                 labels=self.labels, after=[self.guard.container]),
                opts=self.child_opts,
            )

        self.runtime = None
        if plan.runtime:
            # The sessions' API: binds sessions to the declared sandboxes, never creates one.
            self.runtime = RuntimeService(
                f"{name}-runtime",
                RuntimeServiceArgs(plan=plan.runtime, image=self.infra_image, labels=self.labels,
                                   after=[self.guard.container]),
                opts=self.child_opts,
            )

        self.logger = None
        if plan.logger:
            # Every new connection of the pools that log them, before any of their sandboxes starts.
            self.logger = ConnectionLogger(f"{name}-logger", ConnectionLoggerArgs(plan.logger, self.infra_image,
                                                                                  self.labels), opts=self.child_opts)

        self.runtime_url = plan.runtime_url
        self.ready = [self.guard.container] + ([self.gateway.container] if self.gateway else []) + (
            [self.logger.container] if self.logger else [])
        self.register_outputs({
            "address": self.address,
            "infra_image": self.infra_image,
            "networks": {pool: net.name for pool, net in self.networks.items()},
            "guard": self.guard.container_name,
            "gateway": self.gateway.container_name if self.gateway else None,
            "ingress": self.ingress.container_name if self.ingress else None,
            "runtime": self.runtime_url,
            "logger": self.logger.container_name if self.logger else None,
        })

    def _infra_image(self, name: str, child: pulumi.ResourceOptions) -> docker.RemoteImage:
        infra = self.plan.infra
        if infra.declared:
            # A declared image is used as is (pulled by the daemon if missing) and never deleted.
            return docker.RemoteImage(f"{name}-infra", name=infra.name, keep_locally=True, opts=child)
        # sandstack's own gateway/guard image, built on the host from the packaged assets/infra.
        return docker.RemoteImage(
            f"{name}-infra",
            name=infra.name,
            build=docker.RemoteImageBuildArgs(context=str(INFRA_CONTEXT), dockerfile="Dockerfile",
                                              labels=self.labels),
            triggers={"digest": infra.digest},
            keep_locally=False,
            opts=child,
        )
