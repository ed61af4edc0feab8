"""The `SandboxStack` that other Pulumi languages construct (type token `sandstack:index:SandboxStack`).

It is the components' `SandboxStack`, built from a spec given as YAML text or a file path: the same children,
named the same way, as `sandstack.program.build_stack` builds in a Python program. What this module adds is
what Pulumi's schema inference reads: typed arguments and typed outputs, each with a description (the string
under each attribute). No `from __future__ import annotations`: the inference reads the annotations as objects.
"""

import os
from pathlib import Path
from typing import Optional, TypedDict

import pulumi
from pulumi.provider.experimental.util import camel_case

from sandstack.components.sandbox_stack import SandboxStack as StackComponent
from sandstack.components.sandbox_stack import SandboxStackArgs as StackComponentArgs
from sandstack.components.sandbox_stack import name_problem
from sandstack.program import host_outputs, runtime_outputs
from sandstack.spec import SpecError, load_stack, load_text
from sandstack.spec.resolve import ResolvedStack

SPEC_YAML = camel_case("spec_yaml")  # the inputs' names in the schema (and so in every SDK), which errors name
SPEC_FILE = camel_case("spec_file")


# Descriptions: the string under each attribute, which Pulumi's inference puts into the schema as written, so a
# long one is a parenthesised concatenation (one string, no indentation inside) rather than a wrapped docstring.

class SandboxStackArgs(TypedDict, total=False):
    """The spec of one stack, and how to name what it makes. Give exactly one of `specYaml` and `specFile`."""

    spec_yaml: str
    ("A sandstack spec as YAML text (what a `stacks/<stack>.yaml` file holds), e.g. read with Pulumi YAML's "
     "`fn::readFile` or a language's file API. Validated as `sandstack validate` validates a file: errors name "
     "`specYaml` with the line and column. Plain (known before deployment): the spec decides which resources exist.")
    spec_file: str
    ("The path of a sandstack spec file, relative to the Pulumi program's directory. Relative paths inside the "
     "spec (snapshot files, data mounts) are read from the file's folder.")
    source_dir: str
    ("With `specYaml`: the folder that relative paths inside the spec (snapshot files, data mounts) are read "
     "from. Default: the Pulumi program's directory.")
    stack: str
    ("The name of this stack's Docker objects on the hosts (containers, networks, volumes and images are named and "
     "labelled after it). Default: the Pulumi stack's name. Two SandboxStacks in one program need two names.")


class SandboxPort(TypedDict):
    """A port a sandbox declares, and where it is reachable."""

    name: Optional[str]
    """The port's name in the template, if it has one."""
    port: int
    """The port number inside the sandbox."""
    protocol: str
    """`tcp` or `udp`."""
    exposure: str
    ("Who can reach it: `none` (not published), `host` (the host's loopback), `public` (all the host's "
     "interfaces) or `url` (through the host's ingress proxy).")
    address: Optional[str]
    """Where it is reachable (`address:port`, or the URL of a `url` port); none when it is not published."""


class Sandbox(TypedDict):
    """One sandbox: a container of a pool on a host."""

    name: str
    """The sandbox's name in this output, `<host>/<pool>/<index>` (unique in the stack)."""
    pool: str
    """The pool it belongs to."""
    template: str
    """The template it runs."""
    host: str
    """The host it runs on (a key of `hosts`)."""
    container: str
    """The Docker container's name on that host."""
    image: str
    """The image it runs (its template's snapshot, or its base image)."""
    digest: Optional[str]
    """The image's content digest, when known."""
    version: Optional[str]
    """The template's snapshot version, when it declares a snapshot."""
    egress: str
    """Its egress policy: `deny-all`, `allow-list` or `allow-all`."""
    network: str
    """The Docker network it is attached to."""
    ports: list[SandboxPort]
    """The ports it declares, each with where it is reachable."""


class Host(TypedDict):
    """A Docker host of the stack."""

    address: str
    """The host's address: where its public ports are reached."""
    guard: str
    """The host guard's container name (the guard keeps the host closed to the sandboxes)."""


class RuntimeHost(TypedDict):
    """The sandbox runtime service of one host."""

    url: str
    """The runtime's URL."""
    token: str
    """The runtime's bearer token (a secret output)."""


class Runtime(TypedDict):
    """What `sandstack.client` and `sandstack sandbox` read: each runtime, and which hosts serve each pool."""

    hosts: dict[str, RuntimeHost]
    """Each host that runs the runtime service, by host name."""
    pools: dict[str, list[str]]
    """For each pool, the hosts that run both its sandboxes and a runtime."""


class SandboxStack(StackComponent):
    ("Sandboxes for AI agents, declared as code: everything one sandstack spec declares (each host's guard and "
     "egress gateway, sandbox images, networks and pools of sandbox containers), on every Docker host it names.")

    sandboxes: pulumi.Output[list[Sandbox]]
    """Every sandbox of the stack, pool by pool and host by host."""
    # `hosts_` is `hosts` in the schema (Pulumi camel-cases names, and a trailing '_' vanishes): the
    # components' `hosts` attribute holds the host components themselves, which stay what Python code reads.
    hosts_: pulumi.Output[dict[str, Host]]
    """Each host of the stack, by name: its address and its guard."""
    runtime: Optional[pulumi.Output[Runtime]]
    """The sandbox runtime services (URL and token per host, hosts per pool); none when no host runs one."""

    def __init__(self, name: str, args: SandboxStackArgs, opts: Optional[pulumi.ResourceOptions] = None):
        problem = name_problem(name)
        if problem:
            raise input_error(problem)
        spec = load_args(args)
        super().__init__(name, StackComponentArgs(spec=spec, stack=args.get("stack") or pulumi.get_stack()), opts)
        self.hosts_ = pulumi.Output.from_input(host_outputs(self))
        runtime = runtime_outputs(self)
        self.runtime = pulumi.Output.from_input(runtime) if runtime else None


def load_args(args: SandboxStackArgs) -> ResolvedStack:
    """The resolved spec of `specYaml` or `specFile`; every problem is an input error naming the input."""
    given = [key for key in ("spec_yaml", "spec_file") if args.get(key) is not None]
    if len(given) != 1:
        raise input_error(
            f"give exactly one of '{SPEC_YAML}' (the spec's YAML text) and '{SPEC_FILE}' (a spec file's path); "
            f"got {' and '.join(repr(camel_case(k)) for k in given) or 'neither'}")
    for key in ("spec_yaml", "spec_file", "source_dir", "stack"):
        if key in args and not isinstance(args[key], (str, type(None))):
            # A plain input: an Output here means a value from another resource, unknown before deployment.
            raise pulumi.InputPropertyError(camel_case(key), "must be a plain string known before deployment "
                                            "(the spec decides which resources exist)")
    try:
        if "spec_yaml" in given:
            return load_text(args["spec_yaml"], args.get("source_dir") or os.getcwd(), SPEC_YAML)
        return load_stack(Path(args["spec_file"]))
    except SpecError as error:
        raise spec_error(SPEC_YAML if "spec_yaml" in given else SPEC_FILE, error) from None


def spec_error(prop: str, error: SpecError) -> pulumi.InputPropertiesError:
    """Every diagnostic as one property error, its reason the located line `sandstack validate` prints. The
    engine prints an input's value beside an error whose path is exactly that input: a file's path may be shown,
    the spec's text may hold values that must not be (credentials), so `specYaml` errors name their line:column."""
    errors = [{"property_path": prop if prop == SPEC_FILE else f"{prop}:{d.line}:{d.column}", "reason": d.text()}
              for d in error.diagnostics]
    return pulumi.InputPropertiesError(f"{prop} is not a valid sandstack spec", errors)


def input_error(message: str) -> pulumi.InputPropertiesError:
    """An input error about no one input. Its errors are an empty list, not None: with None, Pulumi's provider
    server fails to build the gRPC status, and the engine gets an AttributeError about that instead."""
    return pulumi.InputPropertiesError(message, [])
