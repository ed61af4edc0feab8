"""EgressGateway: the host's one HTTP(S) proxy for allow-list and logged allow-all sandboxes.

Squid from Debian (or the image the host declares) sits on an outbound network and on each gateway
pool's internal network; it is the only thing such a sandbox can reach. It forwards what the pool's
policy allows, refuses the rest with 403, and writes one access-log line per request to a named
volume, which `docker logs` also shows. Its config and settings are its plan (sandstack/plan/gateway.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_docker as docker

from sandstack.components.resource_args import container_labels, run_args, volume_labels
from sandstack.plan import gateway
from sandstack.plan import types
from sandstack.plan.changes import host_container_replace_on_changes
from sandstack.plan.contract import LABEL_ROLE
from sandstack.plan.network import GATEWAY_ALIAS


@dataclass(frozen=True)
class EgressGatewayArgs:
    plan: gateway.GatewayPlan
    image: pulumi.Input[str]
    # Docker network name (output) of each gateway pool's network, by pool name.
    pool_networks: dict[str, pulumi.Input[str]]
    outbound_network: pulumi.Input[str]
    labels: dict[str, str]


class EgressGateway(pulumi.ComponentResource):
    container_name: pulumi.Output[str]
    log_volume: pulumi.Output[str]

    def __init__(self, name: str, args: EgressGatewayArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(types.EGRESS_GATEWAY, name, None, opts)
        plan, run = args.plan, args.plan.run

        # The egress audit log outlives the gateway container, so a restart or replacement keeps it.
        self.log = docker.Volume(
            f"{name}-log", name=plan.log_volume, labels=volume_labels(args.labels),
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )
        # The egress network must be the gateway's route out: Engine API 1.48+ picks the default route by
        # gw_priority; older daemons ignore it and take the routed network whose name sorts first (naming.py).
        networks = [docker.ContainerNetworksAdvancedArgs(name=args.outbound_network,
                                                         gw_priority=gateway.OUTBOUND_GW_PRIORITY)] + [
            # The alias is how sandboxes name their proxy; they need no DNS beyond their own network.
            # A fixed address: the guard opens each pool's bridge to exactly this address and port.
            docker.ContainerNetworksAdvancedArgs(name=args.pool_networks[p.pool], aliases=[GATEWAY_ALIAS],
                                                 ipv4_address=p.address)
            for p in plan.pools
        ]
        # Squid as an unprivileged user with no capabilities and a read-only root: a compromised proxy
        # holds nothing a sandbox does not already have.
        self.container = docker.Container(
            f"{name}-container",
            name=plan.container_name,
            image=args.image,
            user=gateway.USER,
            command=["sh", "-c", gateway.ENTRYPOINT],
            # Docker's init as PID 1: squid refuses to manage a PID file that says 1, and init reaps `tail`.
            init=True,
            envs=plan.env,
            networks_advanced=networks,
            # Its lookups through the host's logging resolver (logged, checked), never the host's own resolvers.
            dns=[plan.resolver] if plan.resolver else None,
            capabilities=docker.ContainerCapabilitiesArgs(drops=["ALL"]),
            security_opts=["no-new-privileges:true"],
            read_only=True,
            tmpfs=dict(gateway.TMPFS),
            mounts=[docker.ContainerMountArgs(type="volume", source=self.log.name, target=gateway.LOG_DIR)],
            memory=gateway.MEMORY_MB,
            memory_swap=gateway.MEMORY_MB,
            cpus=gateway.CPUS,
            cgroup_parent=plan.cgroup_parent,
            **run_args(run),  # restart, health check, wait, grace, log rotation: from the plan
            labels=container_labels({**args.labels, LABEL_ROLE: "gateway"}),
            opts=pulumi.ResourceOptions(parent=self, replace_on_changes=host_container_replace_on_changes()),
        )
        self.container_name = self.container.name
        self.log_volume = self.log.name
        self.register_outputs({"container_name": self.container_name, "log_volume": self.log_volume})
