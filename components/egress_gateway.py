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

from sandstack.plan.changes import host_container_replace_on_changes
from sandstack.plan.contract import cgroup_parent
from sandstack.plan.naming import infra_name
from sandstack.components.resource_args import container_labels, volume_labels
from sandstack.plan.network import GATEWAY_ALIAS
from sandstack.plan.squid import (
    ACCESS_LOG,
    ERROR_DIRECTORY,
    SELF_ADDRESSES,
    GatewayPool,
    render,
)

# Debian's squid error templates, one file per error name (a symlink into squid-langpack).
SQUID_TEMPLATES = "/usr/share/squid/errors/templates"
# Squid's own pages name the sandbox's address, the gateway's host name and squid's version; this one
# names only the error (`%c`, e.g. ERR_ACCESS_DENIED).
ERROR_PAGE = "The sandstack gateway refused this request or could not complete it: %c"
# Before squid starts: its config; its own addresses, which Docker picks (`hostname -I`: all but
# loopback, refused apart, and IPv6 link-local), one a line for the `sandstack_self` acl; and an error
# page for every template name squid may load (one it does not find here it loads from the stock
# templates). Every step must succeed: an empty address list or a missing page would quietly undo a
# refusal, so the gateway does not start instead.
PREPARE = (
    'printf "%s\\n" "$SANDSTACK_SQUID_CONF" > /tmp/squid.conf'
    f" && hostname -I | tr -s ' ' '\\n' > {SELF_ADDRESSES} && grep -q . {SELF_ADDRESSES}"
    f" && mkdir -p {ERROR_DIRECTORY}"
    f" && for t in {SQUID_TEMPLATES}/ERR_*; do printf '%s\\n' '{ERROR_PAGE}' > {ERROR_DIRECTORY}/${{t##*/}}"
    " || exit 1; done"
    f" && test -s {ERROR_DIRECTORY}/ERR_ACCESS_DENIED"
    # TLS error descriptions (no names, no addresses), which squid-openssl loads from the same directory;
    # without them it only logs an error, so an image that lacks them still starts.
    f" && {{ [ ! -e {SQUID_TEMPLATES}/error-details.txt ]"
    f" || cp {SQUID_TEMPLATES}/error-details.txt {ERROR_DIRECTORY}/; }}"
)
# Processes and threads of the gateway (squid, its helpers, `tail`): written by the host guard into the
# gateway's cgroup parent, as for sandboxes (pulumi-docker has no pids-limit input).
GATEWAY_PIDS = 512
# Squid runs in the foreground as the container's main process; `tail` copies the access log to
# stdout so `docker logs` shows it (squid cannot reopen /dev/stdout once it is not root).
ENTRYPOINT = (
    PREPARE
    + f" && touch {ACCESS_LOG} && {{ tail -n 0 -F {ACCESS_LOG} & }}"
    + " && exec squid -N -f /tmp/squid.conf"
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
        # The egress network must be the gateway's route out: Engine API 1.48+ picks the default route by
        # gw_priority; older daemons ignore it and take the routed network whose name sorts first (naming.py).
        networks = [docker.ContainerNetworksAdvancedArgs(name=args.outbound_network, gw_priority=1000)] + [
            # The alias is how sandboxes name their proxy; they need no DNS beyond their own network.
            # A fixed address: the guard opens each pool's bridge to exactly this address and port.
            docker.ContainerNetworksAdvancedArgs(name=args.pool_networks[p.pool], aliases=[GATEWAY_ALIAS],
                                                 ipv4_address=p.address)
            for p in sorted(args.pools, key=lambda p: p.pool)
        ]
        # Squid as an unprivileged user with no capabilities and a read-only root: a compromised proxy
        # holds nothing a sandbox does not already have.
        self.container = docker.Container(
            f"{name}-container",
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
            cgroup_parent=cgroup_parent(infra_name(args.stack, "gateway")),
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
            opts=pulumi.ResourceOptions(parent=self, replace_on_changes=host_container_replace_on_changes()),
        )
        self.container_name = self.container.name
        self.log_volume = self.log.name
        self.register_outputs({"container_name": self.container_name, "log_volume": self.log_volume})
