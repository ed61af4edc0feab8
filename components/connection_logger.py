"""ConnectionLogger: one line per new outbound connection of the host's `protocols: any` pools, whatever the
protocol (time, pool, sandbox address, destination address and port, protocol), and the logging resolvers that
answer every logged pool's lookups (one line per query; what each answers: sandstack/plan/resolver.py).

The guard's rules send each such connection's first packet to an NFLOG group; ulogd2 reads it in the host's
network namespace (where the packets are routed) and writes the lines to a volume that outlives the container.
Its plan is sandstack/plan/logger.py.
"""

from __future__ import annotations

import pulumi

from sandstack.components.register import Planned
from sandstack.plan import types


class ConnectionLogger(Planned):
    TYPE = types.CONNECTION_LOGGER
    container_name: pulumi.Output[str]

    def planned_outputs(self) -> dict:
        self.log, self.container = self.part("-log"), self.part("-container")
        self.container_name = self.container.name
        return {"container_name": self.container_name, "log_volume": self.log.name}
