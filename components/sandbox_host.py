"""SandboxHost: one Docker host, its provider, its networks, its host roles (guard, gateway, ingress, runtime,
logger), and the snapshot images and pools placed on it.

Everything it registers is its nodes of the stack's plan (sandstack/plan/stack_host.py, from `plan_host`); this
component only registers them (components/register.py) and exports their outputs.
"""

from __future__ import annotations

import pulumi

from sandstack.components.register import Planned
from sandstack.plan import types
from sandstack.plan.host import HostPlan, Placement
from sandstack.spec.roles import HOST_ROLES

__all__ = ["Placement", "SandboxHost"]


class SandboxHost(Planned):
    TYPE = types.SANDBOX_HOST
    infra_image: pulumi.Output[str]
    plan: HostPlan

    def planned_outputs(self) -> dict:
        stack_plan = self.registry.plan
        host = next(h for h, keys in stack_plan.host_keys.items() if keys.host == self.node.key)
        self.plan = plan = stack_plan.hosts[host]
        self.address, self.labels, self.runtime_url = plan.address, plan.labels, plan.runtime_url
        self.provider = self.part("-" + HOST_ROLES["provider"].part("provider").name)
        self.infra = self.part("-" + HOST_ROLES["infra"].part("image").name)
        self.infra_image = self.infra.image_id
        pool_network = HOST_ROLES["networks"].part("network", per_pool=True)
        self.networks = {pool: self.part("-" + pool_network.name.format(pool=pool)) for pool in plan.networks}
        # Each host service's component (None where the host has none), and its container's name as an output (the
        # runtime's is its URL).
        self.services = {name: self.part(f"-{name}") for name, role in HOST_ROLES.items() if role.component}
        self.guard, self.gateway, self.ingress, self.runtime, self.logger = (
            self.services[name] for name in ("guard", "gateway", "ingress", "runtime", "logger"))
        return {
            "address": self.address,
            "infra_image": self.infra_image,
            "networks": {pool: net.name for pool, net in self.networks.items()},
            **{name: service.container_name if service else None for name, service in self.services.items()},
            "runtime": self.runtime_url,
        }
