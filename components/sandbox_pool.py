"""SandboxPool: N sandbox containers of one template on one host, with the secure defaults applied, and the
secrets and data volumes their run-once seeders fill before any of them starts. Its nodes:
sandstack/plan/stack.py (`_pool`); the sandboxes' own inputs: sandstack/plan/sandbox.py (`plan_sandbox`)."""

from __future__ import annotations

import pulumi
import pulumi_docker as docker

from sandstack.components.register import Planned
from sandstack.plan import types
from sandstack.plan.sandbox import SUPERVISOR_ENTRYPOINT, output_name, port_address, sandbox_name
from sandstack.plan.stack import PoolPlan

__all__ = ["SandboxPool", "SUPERVISOR_ENTRYPOINT", "sandbox_name"]


class SandboxPool(Planned):
    TYPE = types.SANDBOX_POOL
    sandboxes: pulumi.Output[list[dict]]

    def planned_outputs(self) -> dict:
        pool = self.registry.plan.pools[self.node.key]
        self.containers = [self.parts[key] for key in pool.sandboxes]
        # The names are the planned inputs (a container's and an image's `name` output is its input): only the
        # published ports are read back, so each sandbox waits on one output rather than three.
        image = self.registry.plan.nodes[pool.image].inputs["name"]
        names = [self.registry.plan.nodes[key].inputs["name"] for key in pool.sandboxes]
        self.sandboxes = pulumi.Output.all(*[_describe(pool, i, c, names[i], image)
                                             for i, c in enumerate(self.containers)])
        return {"sandboxes": self.sandboxes}


def _describe(pool: PoolPlan, index: int, container: docker.Container, container_name: str,
              image: str) -> pulumi.Output[dict]:
    t = pool.template

    def field_of(port: object, key: str) -> object:
        return port.get(key) if isinstance(port, dict) else getattr(port, key, None)

    def shape(ports: list | None) -> dict:
        published = {(int(field_of(p, "internal")), field_of(p, "protocol") or "tcp"): p for p in (ports or [])}
        out_ports = []
        for p in t.ports:
            bound = published.get((p.port, p.protocol))
            external = field_of(bound, "external") if bound is not None else None
            address = port_address(p, int(external) if external else None, host_address=pool.host_address,
                                   ingress=pool.ingress, pool=pool.pool, index=index)
            out_ports.append({"name": p.name, "port": p.port, "protocol": p.protocol, "exposure": p.exposure,
                              "address": address})
        return {
            "name": output_name(pool.host, pool.pool, index), "pool": pool.pool, "template": t.name,
            "host": pool.host, "container": container_name,
            "image": image, "digest": pool.digest, "version": t.snapshot_version,
            "egress": t.network.egress, "network": pool.network.name, "ports": out_ports,
        }

    return container.ports.apply(shape)
