"""SandboxTemplate: a template's snapshot image, built once on one Docker host.

Why `RemoteImage` with a build: it builds on the provider's daemon, so one program serves local, ssh and tcp hosts
alike; it never pushes; `triggers` carry the build digest; `keep_locally=False` removes a superseded snapshot after
the pool has moved off it. `docker.Image` pushes by default and rebuilds at every preview;
`pulumi_docker_build.Image` needs buildx on every host and an extra provider plugin. Its nodes:
sandstack/plan/stack.py (`_template`); the build context is written when the image is registered.
"""

from __future__ import annotations

import pulumi

from sandstack.components.register import Planned
from sandstack.plan import types


class SandboxTemplate(Planned):
    TYPE = types.SANDBOX_TEMPLATE
    image_name: pulumi.Output[str]
    image_id: pulumi.Output[str]
    digest: str  # known before anything is built: the digest of the build inputs

    def planned_outputs(self) -> dict:
        self.image = self.part("-image")
        self.image_name, self.image_id = self.image.name, self.image.image_id
        self.digest = next(n.inputs["triggers"]["digest"] for n in self.registry.plan.children(self.node.key)
                           if n.name == f"{self.node.name}-image")
        return {"image_name": self.image_name, "image_id": self.image_id, "digest": self.digest}
