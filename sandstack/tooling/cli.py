"""The `sandstack` command line: validate and check specs, preview and diff stacks, regenerate generated files.

Each command imports what it needs when it runs, not before: `validate` runs in CI on every push, and its
start-up is most of its time (the benchmarks' validate section), so it loads the spec layer only, never the plan,
the review, the policies, the generators or the package metadata.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from sandstack.spec.access import FAIL_ON
from sandstack.tooling.helptext import FORMATTER, command, epilog, sentence
from sandstack.tooling.sandbox_cli import OUTPUTS_ENV, add_sandbox_commands
from sandstack.tooling.validate import EXIT_INVALID, EXIT_OK, EXIT_USAGE


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
        parts = [_plural(len(args.files), "file") + " checked", f"{len(report.valid)} valid"]
        if report.invalid:
            parts.append(f"{len(report.invalid)} invalid")
        if report.unreadable:
            parts.append(f"{len(report.unreadable)} unreadable")
        style = "green" if report.exit_code == EXIT_OK else "red"
        summary = ", ".join(parts) + (f" ({_plural(len(report.diagnostics), 'error')})" if report.diagnostics else "")
        _status_line(summary, style)
    return report.exit_code


def _status_line(text: str, style: str) -> None:
    """One line on stderr, coloured by rich on a terminal. Where rich would print the plain text (not a terminal,
    no variable that forces colour or sets the width, a line shorter than its 80 columns), it is written directly:
    importing rich is a fifth of `validate`'s start-up, and CI, where validate runs most, has no terminal."""
    try:
        terminal = sys.stderr.isatty()
    except ValueError:  # closed
        terminal = False
    forced = any(name in os.environ for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS"))
    if not terminal and not forced and len(text) < 80 and "[" not in text:
        sys.stderr.write(text + "\n")
        return
    from rich.console import Console

    Console(stderr=True, highlight=False).print(text, style=style)


def cmd_generate(args: argparse.Namespace) -> int:
    from sandstack.tooling import generate

    root = Path(args.root)
    try:
        return _generate(generate, root, args.check)
    except (OSError, ValueError) as error:  # a generated file or a source that cannot be read (sandstack.files)
        print(f"sandstack generate: {error}", file=sys.stderr)
        return EXIT_USAGE


def _generate(generate, root: Path, check: bool) -> int:
    if check:
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


def cmd_lock(args: argparse.Namespace) -> int:
    from sandstack.tooling import lock

    return lock.run(args)


def cmd_status(args: argparse.Namespace) -> int:
    from sandstack.tooling import status

    return status.run(args)


def add_check_hosts(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check-hosts", action="store_true",
                        help="also ping each host's Docker daemon (of HEAD, for diff) through its endpoint: unix "
                             "socket, ssh with its ssh_opts, tcp with its TLS material; each host's result on "
                             "stderr with an error class, never a secret; exit 4 when one does not answer")
    parser.add_argument("--config", metavar="FILE",
                        help="with --check-hosts: the stack's config, for the tcp hosts' TLS material, as "
                             "`pulumi config --show-secrets --json > config.json` writes it (without it, tcp hosts "
                             "are reported unchecked), e.g. --config config.json")
    parser.add_argument("--host-timeout", type=float, default=5.0, metavar="SECONDS",
                        help="with --check-hosts: how long each host may take to answer (default 5), e.g. "
                             "--host-timeout 2")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sandstack", formatter_class=FORMATTER,
        description=sentence("Sandboxes for AI agents, declared as code: validate and check stack specs, preview and "
                             "diff what `pulumi up` would do, regenerate generated files, and use running sandboxes; "
                             "`sandstack COMMAND --help` explains each command's options"),
        epilog=epilog("sandstack validate stacks/*.yaml", "sandstack check stacks/prod.yaml --policy policies/ports.yaml",
                      "sandstack preview stacks/dev.yaml",
                      "sandstack diff git:main:stacks/prod.yaml stacks/prod.yaml --format markdown",
                      "sandstack sandbox --outputs outputs.json claim python chat-1"))
    parser.add_argument("--version", action=_Version, help="print sandstack's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    validate = command(sub, "validate", "validate stack spec files: YAML, JSON Schema and semantic rules (exit 0 "
                       "valid, 1 invalid, 2 unreadable)",
                       "sandstack validate stacks/*.yaml", "sandstack validate --format github stacks/prod.yaml")
    validate.add_argument("files", nargs="+", metavar="FILE", help="stack spec files (stacks/<stack>.yaml)")
    validate.add_argument("--format", choices=("text", "json", "github"), default="text",
                          help="text: FILE:LINE:COL lines (default); json: records for tools; github: ::error "
                               "annotations for a pull request")
    validate.set_defaults(func=cmd_validate)

    preview = command(sub, "preview", "what `pulumi up` of a spec makes, offline: every resource, host by host "
                      "(exit 0, 1 invalid, 2 unreadable, 4 a host unreachable with --check-hosts)",
                      "sandstack preview stacks/dev.yaml", "sandstack preview stacks/prod.yaml --format json",
                      "sandstack preview stacks/prod.yaml --check-hosts --config config.json",
                      "sandstack preview git:main:stacks/prod.yaml --stack prod --format markdown")
    preview.add_argument("spec", metavar="STACKFILE", help="a stack file, or git:REF:PATH (read from git, e.g. "
                                                          "git:main:stacks/prod.yaml)")
    preview.add_argument("--format", choices=("text", "json", "markdown"), default="text",
                         help="text: a tree (default); json: stable, sorted records for tools; markdown: for a "
                              "pull-request comment")
    preview.add_argument("--stack", type=stack_name,
                         help="the Pulumi stack name, which names the Docker objects (default: the file's name "
                              "without .yaml), e.g. --stack prod")
    add_check_hosts(preview)
    preview.set_defaults(func=cmd_preview)

    diff = command(sub, "diff", "what `pulumi up` would change from BASE to HEAD and what that does: sandboxes "
                   "restarted, services renewed, data lost, what got less safe (exit 0, 3 when --fail-on "
                   "triggers, 1 invalid, 2 unreadable, 4 a host unreachable with --check-hosts)",
                   "sandstack diff git:main:stacks/prod.yaml stacks/prod.yaml",
                   "sandstack diff git:main:stacks/prod.yaml stacks/prod.yaml --format markdown --fail-on security",
                   "sandstack diff old.yaml new.yaml --stack prod --format json",
                   "sandstack diff git:main:stacks/prod.yaml stacks/prod.yaml --check-hosts --config config.json",
                   "sandstack diff git:main:stacks/prod.yaml stacks/prod.yaml --accept stacks/review/prod.yaml "
                   "--fail-on disruption",
                   "sandstack diff git:main:stacks/prod.yaml stacks/prod.yaml --policy policies/capacity.yaml "
                   "--fail-on capacity --format markdown")
    diff.add_argument("base", metavar="BASE", help="the stack before: a file, or git:REF:PATH (e.g. "
                                                   "git:main:stacks/prod.yaml)")
    diff.add_argument("head", metavar="HEAD", help="the stack after: a file, or git:REF:PATH")
    diff.add_argument("--format", choices=("text", "json", "markdown"), default="text",
                      help="text: the plan as terraform prints one (default); json: versioned records for tools "
                           "(field `format`); markdown: a pull-request comment under GitHub's size limit")
    diff.add_argument("--stack", type=stack_name,
                      help="the Pulumi stack name (default: HEAD's file name without .yaml), e.g. --stack prod")
    diff.add_argument("--fail-on", action="append", choices=FAIL_ON,
                      default=[], metavar="CATEGORY",
                      help="exit 3 when a change of this category is not accepted (repeatable): security (a "
                           "loosening), capacity (a pool reserving more of its hosts, or an organisation's capacity "
                           "bound of --policy exceeded), disruption (sandboxes restarted or destroyed, a host service "
                           "renewed, data lost), data-loss (a volume of sessions, logs or workspace files replaced or "
                           "deleted), replace (any resource replaced or deleted); e.g. --fail-on security --fail-on "
                           "data-loss")
    diff.add_argument("--policy", action="append", default=[], metavar="FILE",
                      help="an organisation policy file (repeatable): its capacity bounds (a host's or the stack's "
                           "total, a change's size) count under --fail-on capacity, and its `prices:` names the "
                           "price list; e.g. --policy policies/capacity.yaml")
    diff.add_argument("--prices", metavar="FILE",
                      help="the platform's price list: the monthly cost before → after in the headline (default: "
                           "the one a --policy file names; none: no cost shown), e.g. --prices policies/prices.yaml")
    diff.add_argument("--accept", metavar="FILE",
                      help="the review file of accepted changes (default: review/<HEAD's file name> in HEAD's "
                           "folder, when HEAD is a file), e.g. --accept stacks/review/prod.yaml")
    diff.add_argument("--strict-accept", action="store_true",
                      help="an acceptance that matches no change is an error (exit 1), not a warning")
    add_check_hosts(diff)
    diff.set_defaults(func=cmd_diff)

    check = command(sub, "check", "validate stack files and check them against the built-in rules and "
                    "organisation policy files (exit 0 clean, 1 findings, 2 unreadable)",
                    "sandstack check stacks/*.yaml",
                    "sandstack check stacks/prod.yaml --policy policies/lifetime.yaml --policy policies/ports.yaml",
                    "sandstack check stacks/prod.yaml --base origin/main --format sarif")
    check.add_argument("files", nargs="+", metavar="STACKFILE", help="stack spec files (stacks/<stack>.yaml)")
    check.add_argument("--policy", action="append", default=[], metavar="FILE",
                       help="an organisation policy file (cerberus rules, settings); repeatable, e.g. "
                            "--policy policies/ports.yaml")
    check.add_argument("--base", metavar="REF",
                       help="compare snapshots with this git ref (git:REF:<file>) or spec, for SBX-SNAP-001, e.g. "
                            "--base origin/main")
    check.add_argument("--format", choices=("text", "json", "github", "sarif"), default="text",
                       help="text (default); json: records; github: ::error annotations; sarif: for code scanning")
    check.add_argument("--strict", action="store_true", help="warnings fail too (exit 1)")
    check.add_argument("--no-suppressions", action="store_true",
                       help="ignore the stacks' suppressions: report every finding")
    check.set_defaults(func=cmd_check)

    lock = command(sub, "lock", "write each stack's address lock beside it (<stack>.lock): every pool's subnet and "
                   "gateway port kept, a new pool's allocated past them, a removed pool's freed; commit it (exit 0, 1 "
                   "invalid, a hand-edited lock, or stale with --check, 2 unreadable)",
                   "sandstack lock stacks/*.yaml", "sandstack lock --check stacks/*.yaml")
    lock.add_argument("files", nargs="+", metavar="STACKFILE", help="stack spec files (stacks/<stack>.yaml)")
    lock.add_argument("--check", action="store_true",
                      help="write nothing; exit 1 when a lock is missing or would change (for CI)")
    lock.add_argument("--stack", type=stack_name,
                      help="the Pulumi stack name a new pool's addresses are hashed from (default: each file's name "
                           "without .yaml), e.g. --stack prod")
    lock.set_defaults(func=cmd_lock)

    gen = command(sub, "generate", "regenerate the generated files from their sources: the JSON Schema, the "
                  "README's reference tables and examples, the package schema",
                  "sandstack generate", "sandstack generate --check")
    gen.add_argument("--check", action="store_true", help="exit 1 if a generated file is stale, write nothing")
    gen.add_argument("--root", default=".", metavar="DIR",
                     help="the repository's root (default: the current directory), e.g. --root ../sandstack")
    gen.set_defaults(func=cmd_generate)

    add_sandbox_commands(sub)
    status = command(sub, "status", "every host and pool: warm/bound/hibernated sandboxes and health, through each "
                                    "host's runtime (exit 0 all up, 1 a host lost)",
                     "sandstack status --outputs outputs.json", "sandstack status --outputs outputs.json --format json")
    status.add_argument("--outputs", metavar="FILE", help=f"stack outputs as JSON (default: ${OUTPUTS_ENV})")
    status.add_argument("--actor", help="who you act for, recorded in the audit log")
    status.add_argument("--format", choices=("text", "json"), default="text",
                        help="text for people, json for tools (default: text)")
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
