"""ConnectionLogger: one line per new outbound connection of the host's `protocols: any` pools, whatever the
protocol (time, pool, sandbox address, destination address and port, protocol), and the logging resolvers that
answer every logged pool's lookups (one line per query; what each answers: sandstack/plan/resolver.py).

The guard's rules hold each such connection's first packet in an NFQUEUE queue; the logger (components/assets/
connlog.py) reads it in the host's network namespace (where the packets are routed), writes the line to a volume
that outlives the container and only then lets the packet pass: with the logger down or behind, connections are
refused, never passed unlogged. It rotates the logs by size. Its plan is sandstack/plan/logger.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_docker as docker

from sandstack.components.resource_args import container_labels, run_args, volume_labels
from sandstack.plan import logger
from sandstack.plan import types
from sandstack.plan.changes import host_container_replace_on_changes
from sandstack.plan.contract import LABEL_ROLE


@dataclass(frozen=True)
class ConnectionLoggerArgs:
    plan: logger.LoggerPlan
    image: pulumi.Input[str]
    labels: dict[str, str]


class ConnectionLogger(pulumi.ComponentResource):
    container_name: pulumi.Output[str]

    def __init__(self, name: str, args: ConnectionLoggerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(types.CONNECTION_LOGGER, name, None, opts)
        plan, run = args.plan, args.plan.run

        # The connection log outlives a restart or renewal of the logger.
        self.log = docker.Volume(
            f"{name}-log", name=plan.log_volume, labels=volume_labels(args.labels),
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )
        # The logger in the host's network namespace with NET_ADMIN (to bind its queue) and NET_BIND_SERVICE (the
        # resolvers' port 53) only, read-only root.
        self.container = docker.Container(
            f"{name}-container",
            name=plan.container_name,
            image=args.image,
            network_mode="host",
            command=plan.command,
            envs=plan.env,
            capabilities=docker.ContainerCapabilitiesArgs(drops=["ALL"], adds=list(logger.CAPABILITIES)),
            security_opts=["no-new-privileges:true"],
            read_only=True,
            tmpfs=dict(logger.TMPFS),
            mounts=[docker.ContainerMountArgs(type="volume", source=self.log.name, target=logger.LOG_DIR)],
            memory=logger.MEMORY_MB,
            memory_swap=logger.MEMORY_MB,
            cpus=logger.CPUS,
            **run_args(run),  # restart, health check, wait, grace, log rotation: from the plan
            labels=container_labels({**args.labels, LABEL_ROLE: "logger"}),
            opts=pulumi.ResourceOptions(parent=self, replace_on_changes=host_container_replace_on_changes()),
        )
        self.container_name = self.container.name
        self.register_outputs({"container_name": self.container_name, "log_volume": self.log.name})
