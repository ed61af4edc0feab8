"""EgressGateway: the host's one HTTP(S) proxy for allow-list and logged allow-all sandboxes.

Squid from Debian (or the image the host declares) sits on an outbound network and on each gateway
pool's internal network; it is the only thing such a sandbox can reach. It forwards what the pool's
policy allows, refuses the rest with 403, and writes one access-log line per request to a named
volume, which `docker logs` also shows.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_docker as docker

from components.naming import container_labels, infra_name, volume_labels
from components.network_plan import GATEWAY_ALIAS
from components.squid_config import ACCESS_LOG, GatewayPool, render

# Squid runs in the foreground as the container's main process; `tail` copies the access log to
# stdout so `docker logs` shows it (squid cannot reopen /dev/stdout once it is not root).
ENTRYPOINT = (
    'printf "%s\\n" "$SANDSTACK_SQUID_CONF" > /tmp/squid.conf'
    f" && touch {ACCESS_LOG} && {{ tail -n 0 -F {ACCESS_LOG} & }}"
    " && exec squid -N -f /tmp/squid.conf"
)


@dataclass(frozen=True)
class EgressGatewayArgs:
    stack: str
    host: str
    image: pulumi.Input[str]
    pools: list[GatewayPool]
    # Docker network name (output) of each gateway pool's network, by pool name.
    pool_networks: dict[str, pulumi.Input[str]]
    outbound_network: pulumi.Input[str]
    labels: dict[str, str]


class EgressGateway(pulumi.ComponentResource):
    container_name: pulumi.Output[str]
    log_volume: pulumi.Output[str]

    def __init__(self, name: str, args: EgressGatewayArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("sandstack:index:EgressGateway", name, None, opts)
        config = render(args.stack, args.host, args.pools)

        # The egress audit log outlives the gateway container, so a restart or replacement keeps it.
        self.log = docker.Volume(
            f"{name}-log", name=infra_name(args.stack, "gateway-log"), labels=volume_labels(args.labels),
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )
        networks = [docker.ContainerNetworksAdvancedArgs(name=args.outbound_network)] + [
            # The alias is how sandboxes name their proxy; they need no DNS beyond their own network.
            # A fixed address: the guard opens each pool's bridge to exactly this address and port.
            docker.ContainerNetworksAdvancedArgs(name=args.pool_networks[p.pool], aliases=[GATEWAY_ALIAS],
                                                 ipv4_address=p.address)
            for p in sorted(args.pools, key=lambda p: p.pool)
        ]
        # Squid as an unprivileged user with no capabilities and a read-only root: a compromised proxy
        # holds nothing a sandbox does not already have.
        self.container = docker.Container(
            f"{name}-proxy",
            name=infra_name(args.stack, "gateway"),
            image=args.image,
            user="proxy",
            command=["sh", "-c", ENTRYPOINT],
            # Docker's init as PID 1: squid refuses to manage a PID file that says 1, and init reaps `tail`.
            init=True,
            envs=[f"SANDSTACK_SQUID_CONF={config}"],
            networks_advanced=networks,
            capabilities=docker.ContainerCapabilitiesArgs(drops=["ALL"]),
            security_opts=["no-new-privileges:true"],
            read_only=True,
            tmpfs={"/tmp": "rw,nosuid,nodev,size=16m"},
            mounts=[docker.ContainerMountArgs(type="volume", source=self.log.name, target="/var/log/squid")],
            memory=256,
            memory_swap=256,
            cpus="1",
            restart="unless-stopped",
            destroy_grace_seconds=10,
            healthcheck=docker.ContainerHealthcheckArgs(
                tests=["CMD", "squid", "-k", "check", "-f", "/tmp/squid.conf"],
                interval="2s", timeout="2s", retries=5, start_period="1s",
            ),
            wait=True,
            wait_timeout=60,
            log_driver="json-file",
            log_opts={"max-size": "10m", "max-file": "5"},
            labels=container_labels({**args.labels, "sandstack.role": "gateway"}),
            opts=pulumi.ResourceOptions(parent=self, replace_on_changes=["healthcheck", "wait", "tmpfs", "init", "destroy_grace_seconds"]),
        )
        self.container_name = self.container.name
        self.log_volume = self.log.name
        self.register_outputs({"container_name": self.container_name, "log_volume": self.log_volume})
