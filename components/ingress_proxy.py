"""IngressProxy: a host's URLs for its sandboxes' `exposure: url` ports.

Caddy (from Debian, in the infra image) sits on a network of its own, where its HTTPS port is published, and
on each pool network with url ports at a fixed address the guard opens to exactly those ports. It routes each
URL's host name to one sandbox and port; any other name under the domain gets a 404. Its configuration is its
plan (sandstack/plan/ingress.py); TLS material only ever comes from secrets.
"""

from __future__ import annotations

import pulumi

from sandstack.components.register import Planned
from sandstack.plan import types


class IngressProxy(Planned):
    TYPE = types.INGRESS_PROXY
    container_name: pulumi.Output[str]

    def planned_outputs(self) -> dict:
        self.network, self.data, self.container = self.part("-net"), self.part("-data"), self.part("-container")
        self.container_name = self.container.name
        return {"container_name": self.container_name, "network": self.network.name}
