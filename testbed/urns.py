"""The URNs a version of the program registers for a stack file, and the aliases it gives each resource.

    python -m testbed.urns STACKFILE [--stack NAME]     # one line per resource: URN tail, then ' <- ' aliases

A URN is what Pulumi identifies a deployed resource by: the stack, the project, the type chain (each parent's type,
then the resource's own, joined by '$') and the logical name. A program version that registers another URN for
the same resource replaces it on `pulumi up` unless one of the new resource's aliases is the old URN. So the
lines here are the URN without its stack and project (`type$chain::name`), which depend on the Pulumi stack only.

It imports nothing of sandstack but `sandstack.program.program`, so it runs any version of the program (with that
version's `sandstack` first on the path): tests/plan/fixtures/urns-before-stackplan/ was written with it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import pulumi
from pulumi.runtime import mocks as pulumi_mocks

PREFIX_PARTS = 2  # 'urn:pulumi:<stack>' and '<project>' before the type chain


def tail(urn: str) -> str:
    """`urn:pulumi:stack::project::a$b::name` → `a$b::name`."""
    return urn.split("::", PREFIX_PARTS)[PREFIX_PARTS]


class _Echo(pulumi_mocks.Mocks):
    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str, dict]:
        out = dict(args.inputs)
        out.setdefault("name", args.name)
        return f"{args.name}-id", out

    def call(self, args: pulumi_mocks.MockCallArgs) -> dict:
        return {}


class _AnySecret(dict):
    """Config where every `sandstack:` key is set: secrets' values never reach a URN."""

    def __contains__(self, key: object) -> bool:
        return str(key).startswith("sandstack:") and key != "sandstack:spec"

    def __getitem__(self, key: str) -> str:
        return "placeholder"


def program_urns(spec: Path, stack: str) -> dict[str, list[str]]:
    """Every custom and component resource the program registers for `spec`: URN tail → its aliases' URN tails."""
    from sandstack.program import program

    seen: dict[str, list[str]] = {}
    # The engine's URN qualifies a type with its parent's whole type chain, and a child of the program's root Stack
    # with nothing; the mocks' own URNs name only the parent's last type, so the chain is kept here by mock URN.
    chain: dict[str, str] = {}
    register = pulumi_mocks.MockMonitor.RegisterResource

    def recording(monitor, request):
        response = register(monitor, request)
        mock_urn = monitor.make_urn(request.parent, request.type, request.name)
        if request.type == "pulumi:pulumi:Stack":
            chain[mock_urn] = ""
            return response
        above = chain.get(request.parent, "") if request.parent else ""
        chain[mock_urn] = f"{above}${request.type}" if above else request.type
        # Aliases arrive as full URNs (the program gives full URNs: sandstack/plan/tree.py, Options.aliases) or as
        # specs the engine resolves, which are reported as such.
        seen[f"{chain[mock_urn]}::{request.name}"] = sorted(
            tail(a.urn) if a.urn else f"<alias spec {a.spec}>" for a in request.aliases)
        return response

    pulumi_mocks.MockMonitor.RegisterResource = recording  # type: ignore[method-assign]
    try:
        pulumi.runtime.set_mocks(_Echo(), project="sandstack", stack=stack, preview=False)
        from pulumi.runtime.config import CONFIG
        CONFIG.set(_AnySecret())
        with tempfile.TemporaryDirectory(prefix="sandstack-urns-") as build:
            pulumi.runtime.test(lambda: program(spec, build_root=Path(build)).sandboxes)()
    finally:
        pulumi_mocks.MockMonitor.RegisterResource = register  # type: ignore[method-assign]
    return seen


def lines(urns: dict[str, list[str]]) -> list[str]:
    return [f"{urn} <- {' '.join(aliases)}" if aliases else urn for urn, aliases in sorted(urns.items())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.urns")
    parser.add_argument("spec", type=Path)
    parser.add_argument("--stack", default=None, help="the Pulumi stack (default: the file's stem)")
    args = parser.parse_args(argv)
    print("\n".join(lines(program_urns(args.spec, args.stack or args.spec.stem))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
