"""The `sandstack` command line: validate and check specs, preview and diff stacks, regenerate generated files.

Each command imports what it needs when it runs, not before: `validate` runs in CI on every push, and its
start-up is most of its time (the benchmarks' validate section), so it loads the spec layer only, never the plan,
the review, the policies, the generators or the package metadata.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from sandstack.tooling.sandbox_cli import OUTPUTS_ENV, add_sandbox_commands
from sandstack.tooling.validate import EXIT_INVALID, EXIT_OK


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sandstack")
    except PackageNotFoundError:  # a checkout that was never installed
        return "unknown (not installed)"


class _Version(argparse._VersionAction):
    """argparse's `--version`, reading the package metadata only when asked."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # type: ignore[override]
        self.version = f"%(prog)s {package_version()}"
        super().__call__(parser, namespace, values, option_string)


# A Pulumi stack name (letters, digits, '-', '_', '.'), which also goes into every Docker object's name.
STACK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it


def stack_name(text: str) -> str:
    """An argparse type: a `--stack` value a Pulumi stack and Docker's names accept, else a usage error."""
    if not STACK_NAME.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a stack name: letters, digits, '-', '_' and '.', starting with a letter or digit, "
            f"at most 100 characters (pattern {STACK_NAME.pattern})")
    return text


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def cmd_validate(args: argparse.Namespace) -> int:
    from sandstack.spec.errors import render
    from sandstack.tooling.validate import validate_files

    report = validate_files(args.files)
    if report.diagnostics and args.format != "text":
        print(render(report.diagnostics, args.format))
    elif args.format == "json":
        print("[]")
    else:
        for line in (d.text() for d in report.diagnostics):
            print(line)
    if args.format == "text":
        from rich.console import Console

        err = Console(stderr=True, highlight=False)
        parts = [_plural(len(args.files), "file") + " checked", f"{len(report.valid)} valid"]
        if report.invalid:
            parts.append(f"{len(report.invalid)} invalid")
        if report.unreadable:
            parts.append(f"{len(report.unreadable)} unreadable")
        style = "green" if report.exit_code == EXIT_OK else "red"
        summary = ", ".join(parts) + (f" ({_plural(len(report.diagnostics), 'error')})" if report.diagnostics else "")
        err.print(summary, style=style)
    return report.exit_code


def cmd_generate(args: argparse.Namespace) -> int:
    from sandstack.tooling import generate

    root = Path(args.root)
    if args.check:
        stale = generate.stale(root)
        for path in stale:
            print(f"{path} is stale: run `{generate.REGENERATE}` and commit the result", file=sys.stderr)
        return EXIT_INVALID if stale else EXIT_OK
    changed = generate.write(root)
    print("\n".join(f"wrote {p}" for p in changed) or "all generated files are up to date")
    return EXIT_OK


def cmd_preview(args: argparse.Namespace) -> int:
    from sandstack.tooling import review

    return review.preview(args)


def cmd_diff(args: argparse.Namespace) -> int:
    from sandstack.tooling import review

    return review.diff(args)


def cmd_check(args: argparse.Namespace) -> int:
    from sandstack.tooling import check

    return check.run(args, package_version())


def cmd_status(args: argparse.Namespace) -> int:
    from sandstack.tooling import status

    return status.run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sandstack", description="Sandboxes for AI agents, declared as code.")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True)

    validate = sub.add_parser("validate", help="validate stack spec files (exit 0 valid, 1 invalid, 2 unreadable)")
    validate.add_argument("files", nargs="+", metavar="FILE")
    validate.add_argument("--format", choices=("text", "json", "github"), default="text")
    validate.set_defaults(func=cmd_validate)

    preview = sub.add_parser("preview", help="what `pulumi up` of a spec makes, offline (exit 0, 1 invalid, 2 unreadable)")
    preview.add_argument("spec", metavar="STACKFILE", help="a stack file, or git:REF:PATH")
    preview.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    preview.add_argument("--stack", type=stack_name,
                         help="the Pulumi stack name (default: the file's name without .yaml)")
    preview.set_defaults(func=cmd_preview)

    diff = sub.add_parser("diff", help="what `pulumi up` would change from BASE to HEAD, and whether security "
                                       "got looser (exit 0, 3 when --fail-on triggers, 1 invalid, 2 unreadable)")
    diff.add_argument("base", metavar="BASE", help="a stack file, or git:REF:PATH (e.g. git:main:stacks/prod.yaml)")
    diff.add_argument("head", metavar="HEAD", help="a stack file, or git:REF:PATH")
    diff.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    diff.add_argument("--stack", type=stack_name,
                      help="the Pulumi stack name (default: HEAD's file name without .yaml)")
    diff.add_argument("--fail-on", action="append", choices=("replace", "security"), default=[],
                      help="exit 3 when a resource is replaced or deleted, or when security gets looser")
    diff.set_defaults(func=cmd_diff)

    check = sub.add_parser("check", help="validate stack files and check them against the built-in rules and "
                                         "policy files (exit 0 clean, 1 findings, 2 unreadable)")
    check.add_argument("files", nargs="+", metavar="STACKFILE")
    check.add_argument("--policy", action="append", default=[], metavar="FILE",
                       help="an organisation policy file (cerberus rules, settings); repeatable")
    check.add_argument("--base", metavar="REF",
                       help="compare snapshots with this git ref (git:REF:<file>) or spec, for SBX-SNAP-001")
    check.add_argument("--format", choices=("text", "json", "github", "sarif"), default="text")
    check.add_argument("--strict", action="store_true", help="warnings fail too")
    check.add_argument("--no-suppressions", action="store_true", help="ignore the stacks' suppressions")
    check.set_defaults(func=cmd_check)

    gen = sub.add_parser("generate", help="regenerate the JSON Schema and the README reference from the models")
    gen.add_argument("--check", action="store_true", help="exit 1 if a generated file is stale, write nothing")
    gen.add_argument("--root", default=".", help="repository root (default: current directory)")
    gen.set_defaults(func=cmd_generate)

    add_sandbox_commands(sub)
    status = sub.add_parser("status", help="every host and pool: warm/bound/hibernated sandboxes and health, "
                                           "through each host's runtime (exit 0 all up, 1 a host lost)")
    status.add_argument("--outputs", metavar="FILE", help=f"stack outputs as JSON (default: ${OUTPUTS_ENV})")
    status.add_argument("--actor", help="who you act for, recorded in the audit log")
    status.add_argument("--format", choices=("text", "json"), default="text")
    status.set_defaults(func=cmd_status)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("sandstack: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
