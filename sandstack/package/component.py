"""The `SandboxStack` that other Pulumi languages construct (type token `sandstack:index:SandboxStack`).

It is the components' `SandboxStack`, built from a spec given as typed values (`spec`, whose types
`sandstack.package.spec_types` generates from the models), as YAML text or as a file path: the same children,
named the same way, as `sandstack.program.build_stack` builds in a Python program. A typed spec may hold outputs of
other resources: the children are then registered once they are known (`sandstack.package.typed_input`). What this module adds is
what Pulumi's schema inference reads: typed arguments and typed outputs, each with a description (the string
under each attribute). No `from __future__ import annotations`: the inference reads the annotations as objects.
"""

import asyncio
import os
from pathlib import Path
from typing import Any, Optional, TypedDict

import pulumi
from pulumi.provider.experimental.util import camel_case

from sandstack.components.sandbox_stack import SandboxStack as StackComponent
from sandstack.components.sandbox_stack import SandboxStackArgs as StackComponentArgs
from sandstack.components.sandbox_stack import name_problem
from sandstack.package.spec_types import spec_types
from sandstack.package.typed_input import Resolved, has_outputs, plannable, resolve, show
from sandstack.program import host_outputs, runtime_outputs
from sandstack.spec import SpecError, load_data, load_stack, load_text
from sandstack.spec.credentials import HIDDEN, redact
from sandstack.spec.resolve import ResolvedStack

SPEC = "spec"  # the inputs' names in the schema (and so in every SDK), which errors name
SPEC_YAML = camel_case("spec_yaml")
SPEC_FILE = camel_case("spec_file")
GIVE_ONE = (f"give exactly one of '{SPEC}' (the spec's typed values), '{SPEC_YAML}' (its YAML text) and "
            f"'{SPEC_FILE}' (a spec file's path)")


# Descriptions: the string under each attribute, which Pulumi's inference puts into the schema as written, so a
# long one is a parenthesised concatenation (one string, no indentation inside) rather than a wrapped docstring.

class SandboxStackArgs(TypedDict, total=False):
    """The spec of one stack, and how to name what it makes. Give exactly one of `spec`, `specYaml` and `specFile`
    (`spec`, typed, is added to the schema by the provider: Pulumi's inference cannot read the spec's models)."""

    spec_yaml: str
    ("A sandstack spec as YAML text (what a `stacks/<stack>.yaml` file holds), e.g. read with Pulumi YAML's "
     "`fn::readFile` or a language's file API. Validated as `sandstack validate` validates a file: errors name "
     "`specYaml` with the line and column. Plain (known before deployment): the spec decides which resources exist.")
    spec_file: str
    ("The path of a sandstack spec file, relative to the Pulumi program's directory. Relative paths inside the "
     "spec (snapshot files, data mounts) are read from the file's folder.")
    source_dir: str
    ("With `spec` or `specYaml`: the folder that relative paths inside the spec (snapshot files, data mounts) are read "
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
        stack = args.get("stack") or pulumi.get_stack()
        if given(args) == ["spec"] and has_outputs(args["spec"]):
            self._later(name, args, stack, opts)
            return
        spec = load_args(args)
        super().__init__(name, StackComponentArgs(spec=spec, stack=stack), opts)
        self.hosts_ = pulumi.Output.from_input(host_outputs(self))
        runtime = runtime_outputs(self)
        self.runtime = pulumi.Output.from_input(runtime) if runtime else None

    def _later(self, name: str, args: SandboxStackArgs, stack: str, opts: Optional[pulumi.ResourceOptions]) -> None:
        """A typed spec holding outputs of other resources: the stack is registered now, its children once every
        value is known; the outputs follow."""
        plain(args, ("source_dir", "stack"))
        super().__init__(name, None, opts)
        source_dir = args.get("source_dir") or os.getcwd()
        ready = pulumi.Output.from_input(resolve(args["spec"])).apply(
            lambda resolved: self._build_resolved(resolved, stack, source_dir))
        # Each output once the children are registered (from_input: the values hold the children's outputs).
        self.sandboxes = ready.apply(lambda outputs: pulumi.Output.from_input(outputs["sandboxes"]))
        self.hosts_ = ready.apply(lambda outputs: pulumi.Output.from_input(outputs["hosts"]))
        self.runtime = ready.apply(lambda outputs: pulumi.Output.from_input(outputs["runtime"]))

    def _build_resolved(self, resolved: Resolved, stack: str, source_dir: str) -> dict[str, Any]:
        if resolved.unknown and not pulumi.runtime.is_dry_run():  # the engine sends an update known values
            raise input_error(f"not known at the update: {', '.join(show(p) for p in resolved.unknown)}")
        if resolved.unknown:
            return self._preview(resolved, stack, source_dir)
        spec = load_typed(resolved.data, source_dir, resolved.secret)
        self.build(StackComponentArgs(spec=spec, stack=stack, carried=tuple(resolved.carried)))
        return {"sandboxes": self.sandboxes, "hosts": host_outputs(self), "runtime": runtime_outputs(self)}

    def _preview(self, resolved: Resolved, stack: str, source_dir: str) -> dict[str, Any]:
        """A preview with values not known yet: what does not depend on them is planned and registered; the
        warning names each unknown value and what was left out; the outputs are unknown."""
        unknown = ", ".join(show(p) for p in resolved.unknown)
        reduced, left_out = plannable(resolved.data, resolved.unknown)
        planned = reduced is not None
        if planned:
            try:
                spec = load_typed(reduced, source_dir, resolved.secret)
            except pulumi.InputPropertiesError:
                planned = False  # what is left is not a valid spec on its own (e.g. a token's pool left out)
        if planned:
            self.build(StackComponentArgs(spec=spec, stack=stack, carried=tuple(resolved.carried)))
            parts = "; ".join(f"{section} {', '.join(names)}" for section, names in left_out.items())
            pulumi.log.warn(f"not known until the update: {unknown}. This preview plans the stack without {parts}.",
                            resource=self)
        else:
            pulumi.log.warn(f"not known until the update: {unknown}. This preview plans none of the stack's "
                            "resources: the update plans them once the values are known.", resource=self)
        return {"sandboxes": unknown_output(), "hosts": unknown_output(), "runtime": unknown_output()}


def unknown_output() -> pulumi.Output:
    """An output whose value a preview does not know."""
    def done(value: Any) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        future.set_result(value)
        return future
    return pulumi.Output(set(), done(None), done(False))


def given(args: SandboxStackArgs) -> list[str]:
    return [key for key in ("spec", "spec_yaml", "spec_file") if args.get(key) is not None]  # type: ignore[misc]


def plain(args: SandboxStackArgs, keys: tuple[str, ...]) -> None:
    for key in keys:
        if key in args and not isinstance(args[key], (str, type(None))):  # type: ignore[literal-required]
            # A plain input: an Output here means a value from another resource, unknown before deployment.
            raise pulumi.InputPropertyError(camel_case(key), "must be a plain string known before deployment "
                                            "(the spec decides which resources exist)")


def load_args(args: SandboxStackArgs) -> ResolvedStack:
    """The resolved spec of `spec` (plain typed values), `specYaml` or `specFile`; every problem is an input error
    naming the input."""
    found = given(args)
    if len(found) != 1:
        raise input_error(f"{GIVE_ONE}; got {' and '.join(repr(camel_case(k)) for k in found) or 'neither'}")
    plain(args, ("spec_yaml", "spec_file", "source_dir", "stack"))
    source_dir = args.get("source_dir") or os.getcwd()
    if found == ["spec"]:
        return load_typed(args["spec"], source_dir, [])  # type: ignore[typeddict-item]
    try:
        if found == ["spec_yaml"]:
            return load_text(args["spec_yaml"], source_dir, SPEC_YAML)
        return load_stack(Path(args["spec_file"]))
    except SpecError as error:
        raise spec_error(SPEC_YAML if found == ["spec_yaml"] else SPEC_FILE, error) from None


def load_typed(data: Any, source_dir: str, secret: list) -> ResolvedStack:
    """The resolved spec of typed values (Pulumi's names), validated as a spec file's mapping is; errors name
    the path in the program's names (`spec.templates.python.baseImage`)."""
    types = spec_types()
    try:
        return load_data(types.to_spec(data), source_dir, SPEC)
    except SpecError as error:
        raise typed_error(error, data, secret) from None


def typed_error(error: SpecError, data: Any, secret: list) -> pulumi.InputPropertiesError:
    """Every diagnostic as one property error at its path in the program's names. The engine prints the value at
    an error's path beside it: where that value is a secret (an output marked secret, a property the schema marks
    secret, text that looks like a credential) or a whole object or list, which may hold one, the path carries
    '(value not shown)', which names no value. A secret's text is hidden in the reasons too."""
    types = spec_types()
    secrets = {value_at(data, p) for p in secret} - {None}
    errors = []
    for d in error.diagnostics:
        shown, marked = types.locate(d.path)
        reason = d.message
        for text in secrets:
            reason = reason.replace(str(text), HIDDEN)
        value = value_at(data, parse(d.path))
        hidden = marked or isinstance(value, (dict, list)) or str(value) in {str(s) for s in secrets} or (
            isinstance(value, str) and redact(value) != value)
        errors.append({"property_path": f"{shown} (value not shown)" if hidden else shown,
                       "reason": f"{shown}: {reason}"})
    return pulumi.InputPropertiesError(f"{SPEC} is not a valid sandstack spec", errors)


def parse(path: str) -> tuple:
    """A diagnostic's JSON path in the program's names, as keys and indexes (to find the value there)."""
    return spec_types().typed_parts(path)


def value_at(data: Any, path: tuple) -> Any:
    for part in path:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return None
    return data
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
