"""EgressGateway: the host's one HTTP(S) proxy for allow-list and logged allow-all sandboxes.

Squid from Debian (or the image the host declares) sits on an outbound network and on each gateway
pool's internal network; it is the only thing such a sandbox can reach. It forwards what the pool's
policy allows, refuses the rest with 403, and writes one access-log line per request to a named
volume, which `docker logs` also shows. Its config and settings are its plan (sandstack/plan/gateway.py).
"""

from __future__ import annotations

import pulumi

from sandstack.components.register import Planned
from sandstack.plan import types


class EgressGateway(Planned):
    TYPE = types.EGRESS_GATEWAY
    container_name: pulumi.Output[str]
    log_volume: pulumi.Output[str]

    def planned_outputs(self) -> dict:
        # The egress audit log outlives the gateway container, so a restart or replacement keeps it.
        self.log, self.container = self.part("-log"), self.part("-container")
        self.container_name, self.log_volume = self.container.name, self.log.name
        return {"container_name": self.container_name, "log_volume": self.log_volume}
