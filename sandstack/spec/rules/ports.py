"""Ports: each fixed host port owned by one sandbox per host, each container port declared once."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterator

from sandstack.spec.errors import Diagnostic, JsonPath
from sandstack.spec.rules.context import Context, placements, rule, templates


@rule("unique-host-port")
def host_ports_unique(ctx: Context) -> Iterator[Diagnostic]:
    claims: dict[tuple[str, int, str], list[tuple[JsonPath, str]]] = defaultdict(list)
    for pool, template_name, host, replicas in placements(ctx):
        for i, port in enumerate(ctx.stack.templates[template_name].ports):
            if port.host_port is None or port.exposure == "none" or replicas == 0:
                continue
            where = ("templates", template_name, "ports", i, "host_port")
            # Every replica binds the same port, so replicas > 1 on one host collide with each other.
            claims[(host, port.host_port, port.protocol)].extend([(where, pool)] * replicas)
    for (host, number, protocol), owners in claims.items():
        if len(owners) > 1:
            pools = sorted({pool for _, pool in owners})
            who = (f"{len(owners)} replicas of pool {pools[0]!r}" if len(pools) == 1
                   else "pools " + ", ".join(repr(p) for p in pools))
            for where in dict.fromkeys(w for w, _ in owners):
                yield ctx.error(where, f"host port {number}/{protocol} on host {host!r} is claimed by {who}; "
                                "one sandbox per host can own a fixed port (drop `host_port` to let Docker pick)",
                                "unique-host-port")


@rule("unique-ports")
def container_ports_unique(ctx: Context) -> Iterator[Diagnostic]:
    for path, template in templates(ctx):
        seen: set[tuple[int, str]] = set()
        for i, port in enumerate(template.ports):
            if (port.port, port.protocol) in seen:
                yield ctx.error(path + ("ports", i, "port"), f"port {port.port}/{port.protocol} is declared twice",
                                "unique-ports")
            seen.add((port.port, port.protocol))
            if port.host_port is not None and port.exposure == "none":
                yield ctx.error(path + ("ports", i, "host_port"), "`host_port` needs exposure 'host' or 'public'; "
                                "exposure 'none' publishes nothing", "unique-ports")


# This module's rules, in the order they run (the registry, sandstack.spec.rules.RULES, lists each module).
RULES = (host_ports_unique, container_ports_unique,)
