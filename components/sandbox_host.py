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
        self.provider = self.part("-provider")
        self.infra = self.part("-infra")
        self.infra_image = self.infra.image_id
        self.networks = {pool: self.part(f"-net.{pool}") for pool in plan.networks}
        self.guard, self.gateway = self.part("-guard"), self.part("-gateway")
        self.ingress, self.runtime, self.logger = self.part("-ingress"), self.part("-runtime"), self.part("-logger")
        return {
            "address": self.address,
            "infra_image": self.infra_image,
            "networks": {pool: net.name for pool, net in self.networks.items()},
            "guard": self.guard.container_name,
            "gateway": self.gateway.container_name if self.gateway else None,
            "ingress": self.ingress.container_name if self.ingress else None,
            "runtime": self.runtime_url,
            "logger": self.logger.container_name if self.logger else None,
        }
