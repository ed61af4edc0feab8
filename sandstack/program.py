"""The Pulumi program, as a library function that `__main__.py`, a user's own program, the tests and the
benchmarks all call.

    import sandstack.program
    sandstack.program.program()                      # stacks/<pulumi stack>.yaml, or config `sandstack:spec`

    # A program of one's own, with two specs side by side, one of them built in code:
    from sandstack.program import build_stack
    a = build_stack("stacks/agents.yaml", name="agents", stack="agents")
    b = build_stack({"version": 1, "hosts": {...}, "templates": {...}}, name="ci", stack="ci")

A spec is a file, an object (the mapping a spec file parses to, or a validated `sandstack.spec.Stack`) or an
already resolved stack. Files and objects go through the same loader as `sandstack validate` (schema, rules,
resolution); an invalid one creates nothing and fails with the same located messages, without a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping
from os import PathLike
from pathlib import Path

import pulumi

from sandstack.components.sandbox_stack import DEFAULT_BUILD_ROOT, SandboxStack, SandboxStackArgs
from sandstack.components.secrets import secret_value
from sandstack.spec import OBJECT, SpecError, Stack, load_data, load_stack
from sandstack.spec.resolve import ResolvedStack

# A spec file's path, a spec object (the mapping a file parses to, or a `Stack` model), or a resolved stack.
SpecSource = str | PathLike | Mapping | Stack | ResolvedStack


def load(spec: SpecSource, source_dir: str | PathLike | None = None) -> ResolvedStack:
    """A resolved spec from a file or an object (validated), or as given. An object's relative paths (snapshot
    files, data mounts) are read from `source_dir` (default: the working directory)."""
    if isinstance(spec, ResolvedStack):
        return spec
    try:
        if isinstance(spec, (Mapping, Stack)):
            return load_data(spec, Path.cwd() if source_dir is None else Path(source_dir))
        return load_stack(spec)
    except SpecError as error:
        shown = OBJECT if isinstance(spec, (Mapping, Stack)) else spec
        raise pulumi.RunError(f"{shown} is not a valid sandstack spec:\n{error}") from None


def build_stack(spec: SpecSource, *, name: str = "sandstack", stack: str | None = None,
                source_dir: str | PathLike | None = None, build_root: Path = DEFAULT_BUILD_ROOT,
                opts: pulumi.ResourceOptions | None = None) -> SandboxStack:
    """One `SandboxStack` component for `spec` (see `load`). `name` is its Pulumi name (unique in a program);
    `stack` names its Docker objects (default: the Pulumi stack's name), so two specs in one program need two."""
    return SandboxStack(name, SandboxStackArgs(spec=load(spec, source_dir), stack=stack or pulumi.get_stack(),
                                               build_root=build_root), opts)


def program(spec: SpecSource | None = None, *, name: str = "sandstack", stack: str | None = None,
            source_dir: str | PathLike | None = None, build_root: Path = DEFAULT_BUILD_ROOT,
            opts: pulumi.ResourceOptions | None = None) -> SandboxStack:
    """The whole program of this repository's `Pulumi.yaml`: the spec (default: config `sandstack:spec`,
    else `stacks/<stack>.yaml`), its components (`build_stack`, with the same arguments), and the outputs
    consumers read with `pulumi stack output --json`: `sandboxes`, `hosts`, and `runtime` (sandstack.client's
    input) when a host runs the runtime. One per program: its outputs have fixed names."""
    if spec is None:
        spec = pulumi.Config().get("spec") or f"stacks/{pulumi.get_stack()}.yaml"
    built = build_stack(spec, name=name, stack=stack, source_dir=source_dir, build_root=build_root, opts=opts)
    pulumi.export("sandboxes", built.sandboxes)
    pulumi.export("hosts", host_outputs(built))
    runtime = runtime_outputs(built)
    if runtime:
        pulumi.export("runtime", runtime)
    return built


def host_outputs(built: SandboxStack) -> dict:
    """Each host's address and its guard's container name, by host name."""
    return {name: {"address": host.address, "guard": host.guard.container_name} for name, host in built.hosts.items()}


def runtime_outputs(built: SandboxStack) -> dict | None:
    """What `sandstack.client` reads: each runtime's URL and token (a secret output), and each pool's hosts that
    run one; None when no host declares a runtime."""
    hosts = {name: {"url": host.runtime_url, "token": secret_value(host.plan.runtime.spec.token.secret)}
             for name, host in built.hosts.items() if host.runtime_url}
    if not hosts:
        return None
    pools = {}
    for pool, spec in built.spec.pools.items():
        placed = [h for h in dict.fromkeys(spec.hosts) if h in hosts and spec.replicas > 0]
        if placed:
            pools[pool] = placed
    return {"hosts": hosts, "pools": pools}
