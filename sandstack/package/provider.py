"""The provider of the sandstack package: Pulumi's component provider serving `SandboxStack`, its schema
inferred by Pulumi from the component's types (`pulumi.provider.experimental`).

    python -m sandstack.package.provider ENGINE_ADDRESS   # what package/__main__.py runs; prints its port

It is `component_provider_host`'s provider with one difference: an input error a component raises
(`pulumi.InputPropertiesError`, `pulumi.InputPropertyError`: an invalid spec, with sandstack's located messages)
reaches Pulumi as an input error, where the host would turn it, like any exception from a component, into its
message followed by a Python traceback.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import PackageNotFoundError, version

import pulumi
from pulumi.provider import main as serve
from pulumi.provider.experimental.component import ComponentProvider
from pulumi.provider.server import ComponentInitError

from sandstack.package.component import SandboxStack

PACKAGE = "sandstack"  # the package name: type tokens are `sandstack:index:<Component>`
COMPONENTS = [SandboxStack]


def package_version() -> str:
    """The installed sandstack's version (the SDKs Pulumi generates carry it)."""
    try:
        return version(PACKAGE)
    except PackageNotFoundError:  # a checkout on sys.path, not installed
        return "0.0.0"


class SandstackProvider(ComponentProvider):
    def __init__(self) -> None:
        super().__init__(COMPONENTS, PACKAGE, version=package_version())

    def construct(self, name, resource_type, inputs, options=None):
        try:
            return super().construct(name, resource_type, inputs, options)
        except ComponentInitError as error:
            if isinstance(error.inner, (pulumi.InputPropertiesError, pulumi.InputPropertyError)):
                raise error.inner from None
            raise


def schema() -> dict:
    """The package schema Pulumi infers from the components (what GetSchema answers)."""
    return json.loads(SandstackProvider().schema)


def render_schema() -> str:
    """The committed `package/schema.json`: the schema, keys sorted, two-space indent, final newline."""
    return json.dumps(schema(), indent=2, sort_keys=True) + "\n"


def main(args: list[str] | None = None) -> None:
    """Serve the provider as a plugin: listen on a free local port, print it, answer the engine over gRPC."""
    serve(SandstackProvider(), sys.argv[1:] if args is None else args)


if __name__ == "__main__":
    main()
