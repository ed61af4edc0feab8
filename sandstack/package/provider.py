"""The provider of the sandstack package: Pulumi's component provider serving `SandboxStack`, its schema
inferred by Pulumi from the component's types (`pulumi.provider.experimental`).

    python -m sandstack.package.provider ENGINE_ADDRESS   # what package/__main__.py runs; prints its port

It is `component_provider_host`'s provider with three differences:

- an input error a component raises (`pulumi.InputPropertiesError`, `pulumi.InputPropertyError`: an invalid spec,
  with sandstack's located messages) reaches Pulumi as an input error, where the host would turn it, like any
  exception from a component, into its message followed by a Python traceback;
- the typed `spec` input and its types (`sandstack.package.spec_types`, generated from the spec's models: Pulumi's
  inference cannot read pydantic models) are added to the inferred schema, and the input reaches the component as
  the engine sent it (Pulumi's names, outputs of other resources included), which the component converts;
- the schema carries the package's metadata, and the runtime's token is marked secret.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import PackageNotFoundError, version

import pulumi
from pulumi.provider import main as serve
from pulumi.provider.experimental.component import ComponentProvider
from pulumi.provider.server import ComponentInitError

from sandstack.package.component import SPEC, SandboxStack
from sandstack.package.spec_types import spec_types

PACKAGE = "sandstack"  # the package name: type tokens are `sandstack:index:<Component>`
COMPONENTS = [SandboxStack]
TOKEN = f"{PACKAGE}:index:SandboxStack"
# The package's metadata. No licence: the repository declares none (pyproject.toml has no `license`, there is no
# LICENSE file). No `pluginDownloadURL`: the plugin is source-based, added from its folder or a git URL
# (`pulumi package add`), which Pulumi records in the program's Pulumi.yaml; there is no binary to download.
REPOSITORY = "<git-host>/<org>/sandstack"  # the README's placeholder for the repository's address
METADATA = {
    "description": "Sandboxes for AI agents, declared as code: a sandstack spec provisioned on Docker hosts.",
    "keywords": ["sandstack", "sandbox", "ai-agents", "docker", "kind/component", "category/infrastructure"],
    "homepage": REPOSITORY,
    "repository": REPOSITORY,
    "publisher": "sandstack",
}


def package_version() -> str:
    """The installed sandstack's version (the SDKs Pulumi generates carry it)."""
    try:
        return version(PACKAGE)
    except PackageNotFoundError:  # a checkout on sys.path, not installed
        return "0.0.0"


class SandstackProvider(ComponentProvider):
    def __init__(self) -> None:
        super().__init__(COMPONENTS, PACKAGE, version=package_version())
        self.schema = json.dumps(with_typed_spec(json.loads(self.schema)))

    def map_inputs(self, inputs, component_def):
        # The typed spec is not among the inferred inputs: it passes as the engine sent it (the component converts
        # Pulumi's names to the spec's and waits for the outputs in it).
        mapped = super().map_inputs(inputs, component_def)
        if inputs.get(SPEC) is not None:
            mapped[SPEC] = inputs[SPEC]
        return mapped

    def construct(self, name, resource_type, inputs, options=None):
        try:
            return super().construct(name, resource_type, inputs, options)
        except ComponentInitError as error:
            if isinstance(error.inner, (pulumi.InputPropertiesError, pulumi.InputPropertyError)):
                raise error.inner from None
            raise


    def map_complex_output(self, instance_val, type_def):
        # An output of a typed spec's stack may be none (`runtime`, when no host runs one) once known.
        return None if instance_val is None else super().map_complex_output(instance_val, type_def)


def with_typed_spec(schema: dict) -> dict:
    """The inferred schema with the typed `spec` input and its types, the metadata, and the token secret."""
    typed = spec_types()
    schema.update(METADATA)
    schema["resources"][TOKEN]["inputProperties"][SPEC] = typed.root
    schema["types"].update(typed.schema_types())
    schema["types"][f"{PACKAGE}:index:RuntimeHost"]["properties"]["token"]["secret"] = True
    return schema


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
