"""IngressProxy: a host's URLs for its sandboxes' `exposure: url` ports.

Caddy (from Debian, in the infra image) sits on a network of its own, where its HTTPS port is published, and
on each pool network with url ports at a fixed address the guard opens to exactly those ports. It routes each
URL's host name to one sandbox and port; any other name under the domain gets a 404. Its configuration is its
plan (sandstack/plan/ingress.py); TLS material only ever comes from secrets.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_docker as docker

from sandstack.components.resource_args import (bridge_options, container_labels, network_labels, run_args,
                                               volume_labels)
from sandstack.components.secrets import secret_value
from sandstack.plan import ingress
from sandstack.plan import types
from sandstack.plan.changes import host_container_replace_on_changes
from sandstack.plan.contract import LABEL_ROLE


@dataclass(frozen=True)
class IngressProxyArgs:
    plan: ingress.IngressPlan
    image: pulumi.Input[str]
    pool_networks: dict[str, pulumi.Input[str]]  # Docker network name (output) by pool
    labels: dict[str, str]
    # The guard: created first and deleted last, so on `pulumi destroy` its bridge is gone when the guard stops
    # (and removes its rules), as for every other sandstack network.
    after: list[pulumi.Resource]


class IngressProxy(pulumi.ComponentResource):
    container_name: pulumi.Output[str]

    def __init__(self, name: str, args: IngressProxyArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(types.INGRESS_PROXY, name, None, opts)
        plan, run = args.plan, args.plan.run

        # Where the proxy's port is published: routed, joined by the proxy alone, never by a sandbox.
        self.network = docker.Network(
            f"{name}-net", name=plan.network, internal=False, driver="bridge",
            options=bridge_options(plan.bridge, icc=True),
            labels=network_labels({**args.labels, LABEL_ROLE: "ingress"}),
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True, depends_on=args.after),
        )
        # ACME certificates outlive a renewal of the container (a CA limits how often it signs the same names).
        self.data = docker.Volume(
            f"{name}-data", name=plan.data_volume, labels=volume_labels(args.labels),
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        ) if plan.spec.acme_email else None
        uploads = []
        if plan.spec.tls:
            uploads = [docker.ContainerUploadArgs(file=f"{ingress.TLS_DIR}/{file}", content=secret_value(ref.secret),
                                                  permissions="0400", owner="65534", group="65534")
                       for file, ref in (("cert.pem", plan.spec.tls.cert), ("key.pem", plan.spec.tls.key))]
        # Caddy as nobody with no capabilities and a read-only root, on its own network and, at a fixed
        # address, on each pool network with url ports.
        self.container = docker.Container(
            f"{name}-container",
            name=plan.container_name,
            image=args.image,
            user=ingress.USER,
            command=["sh", "-c", ingress.ENTRYPOINT],
            init=True,
            envs=plan.env,
            networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=self.network.name)] + [
                docker.ContainerNetworksAdvancedArgs(name=args.pool_networks[pool], ipv4_address=address)
                for pool, address in plan.pools
            ],
            ports=[docker.ContainerPortArgs(internal=inside, external=outside, ip=plan.bind_ip, protocol="tcp")
                   for inside, outside in plan.ports],
            uploads=uploads or None,
            capabilities=docker.ContainerCapabilitiesArgs(drops=["ALL"]),
            security_opts=["no-new-privileges:true"],
            read_only=True,
            tmpfs=plan.tmpfs,
            mounts=[docker.ContainerMountArgs(type="volume", source=self.data.name, target=ingress.DATA_DIR)]
            if self.data else None,
            memory=ingress.MEMORY_MB,
            memory_swap=ingress.MEMORY_MB,
            cpus=ingress.CPUS,
            **run_args(run),  # restart, health check, wait, grace, log rotation: from the plan
            labels=container_labels({**args.labels, LABEL_ROLE: "ingress"}),
            opts=pulumi.ResourceOptions(parent=self, depends_on=args.after,
                                        replace_on_changes=host_container_replace_on_changes()),
        )
        self.container_name = self.container.name
        self.register_outputs({"container_name": self.container_name, "network": self.network.name})
