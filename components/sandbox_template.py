"""SandboxTemplate: a template's snapshot image, built once on one Docker host."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_docker as docker

from sandstack.plan import types
from sandstack.plan.snapshot import image_labels, plan_snapshot, prepare_build
from sandstack.spec.resolve import ResolvedTemplate


@dataclass(frozen=True)
class SandboxTemplateArgs:
    template: ResolvedTemplate
    stack: str
    host: str
    build_root: Path
    host_labels: dict[str, str]


class SandboxTemplate(pulumi.ComponentResource):
    """Builds the snapshot image on the host it is parented to (no push unless `push_to` is declared).

    Why `RemoteImage` with a build: it builds on the provider's daemon, so one program serves local,
    ssh and tcp hosts alike; it never pushes; `triggers` carry the build digest; `keep_locally=False`
    removes a superseded snapshot after the pool has moved off it. `docker.Image` pushes by default
    and rebuilds at every preview; `pulumi_docker_build.Image` needs buildx on every host and an
    extra provider plugin.
    """

    image_name: pulumi.Output[str]
    image_id: pulumi.Output[str]
    digest: str  # known before anything is built: the digest of the build inputs

    def __init__(self, name: str, args: SandboxTemplateArgs, opts: pulumi.ResourceOptions | None = None):
        template = args.template
        plan = prepare_build(template, args.build_root)
        snapshot = plan_snapshot(template, args.stack)
        super().__init__(types.SANDBOX_TEMPLATE, name, {"tag": plan.tag}, opts)
        child = pulumi.ResourceOptions(parent=self)

        # The snapshot: base image + files + setup, run once here at build time, never at sandbox start.
        self.image = docker.RemoteImage(
            f"{name}-image",
            name=snapshot.image,
            build=docker.RemoteImageBuildArgs(
                context=str(plan.context),
                dockerfile="Dockerfile",
                labels=image_labels(template, args.stack, args.host_labels, plan.digest),
                # Every build runs every setup step: with the daemon's layer cache, a bumped version
                # (unchanged steps) got the old steps' layers back and its setup never ran again.
                no_cache=True,
            ),
            triggers={"digest": plan.digest},
            keep_locally=False,
            opts=child,
        )
        if template.push_to:
            # Declared registry: push the same image so hosts without the build context can pull it.
            docker.RegistryImage(
                f"{name}-push", name=self.image.name, keep_remotely=True, opts=pulumi.ResourceOptions(parent=self)
            )

        self.image_name = self.image.name
        self.image_id = self.image.image_id
        self.digest = plan.digest
        self.register_outputs({"image_name": self.image_name, "image_id": self.image_id, "digest": self.digest})
