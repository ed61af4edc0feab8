"""Registers a pulumi-docker resource with the inputs it is given, not one Output per argument it could take.

pulumi-docker's generated constructors (`docker.Container(...)`) put every argument of the resource into the
registration, unset ones as None: ~90 properties for a Container, each of which the SDK turns into an Output with its
own future, task and resolver, although the SDK sends none of the None ones to the engine. Under Pulumi's mocks that
was 19 ms of CPU per sandbox container on this project's machines (benchmarks/sections/program.py), two thirds of it
for the unset arguments. Here the same instance of the same class is registered through the same SDK call
(`CustomResource.__init__` with the class's own input type, so keys are translated by the same metadata and the
engine receives the same inputs) with the set inputs and the properties only the provider computes (`exit_code`,
`image_id`, ...). An argument left unset reads as None on the resource rather than as an Output of what the
provider chose: sandstack reads none of them.
tests/components/test_lean.py holds the registrations equal to the generated constructor's.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import pulumi
import pulumi_docker as docker
from pulumi_docker import _utilities

# The generated input type of each resource class (what its constructor fills).
ARGS: dict[type[pulumi.CustomResource], type] = {
    docker.Container: docker.ContainerArgs, docker.Network: docker.NetworkArgs, docker.Volume: docker.VolumeArgs,
    docker.RemoteImage: docker.RemoteImageArgs, docker.RegistryImage: docker.RegistryImageArgs,
}


def _properties(cls: type) -> set[str]:
    return {name for klass in cls.__mro__ for name, value in vars(klass).items() if isinstance(value, property)}


@lru_cache(maxsize=None)
def computed(cls: type[pulumi.CustomResource]) -> tuple[str, ...]:
    """The resource's output properties that are not arguments (the provider computes them), e.g. a Container's
    `exit_code`: registered as None, as the generated constructor does, so the resource has them."""
    base = _properties(pulumi.CustomResource)
    return tuple(sorted(_properties(cls) - _properties(ARGS[cls]) - base - {"id", "urn"}))


class Registration:
    """`cls(name, **inputs, opts=opts)`, registered with only the set inputs (see the module's note); the resource is
    `.resource`. A class, so that the SDK, which takes the caller of the third `__init__` on the stack for the
    resource's source position, records the caller's line as it does for the generated constructor."""

    def __init__(self, cls: type[pulumi.CustomResource], type_token: str, name: str, inputs: dict[str, Any],
                 opts: pulumi.ResourceOptions) -> None:
        props = ARGS[cls].__new__(ARGS[cls])
        props.__dict__.update({k: v for k, v in inputs.items() if v is not None})
        props.__dict__.update(dict.fromkeys(computed(cls)))
        self.resource = cls.__new__(cls)
        # The defaults the generated constructor merges first: the provider plugin's version (sent with the request).
        opts = pulumi.ResourceOptions.merge(_utilities.get_resource_opts_defaults(), opts)
        pulumi.CustomResource.__init__(self.resource, type_token, name, props, opts)
