"""HostGuard: the one privileged piece, closing a Docker host to its own sandboxes.

Docker filters traffic between networks but never traffic from a container to the host itself, and
pulumi-docker has no pids-limit input. The guard fixes both on the host it runs on: it keeps the
firewall rules of `sandstack/plan/network.py` in place and pre-creates each sandbox's cgroup parent with
its `pids.max`, before any sandbox starts (docs/design/engine-findings.md a, b).

It also enforces lifetimes and idle timeouts from outside the sandboxes: anything inside a sandbox runs
as the sandbox's user in the sandbox's PID namespace, so an in-sandbox supervisor can be stopped, traced
or killed by the very code it limits (docs/design/lifecycle.md). What it enforces is its plan
(sandstack/plan/guard.py); this component only registers it.
"""

from __future__ import annotations

import pulumi

from sandstack.components.register import Planned
from sandstack.plan import types


class HostGuard(Planned):
    TYPE = types.HOST_GUARD
    state_volume: pulumi.Output[str]
    container_name: pulumi.Output[str]

    def planned_outputs(self) -> dict:
        # State shared with sandboxes (read-only there): they wait for its boot-id marker, so after a reboot no
        # sandbox command runs before the firewall and pids limits are back.
        self.state, self.container = self.part("-state"), self.part("-container")
        self.state_volume, self.container_name = self.state.name, self.container.name
        return {"state_volume": self.state_volume, "container_name": self.container_name}
