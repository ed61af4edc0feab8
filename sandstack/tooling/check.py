"""`sandstack check`: validation, built-in rules and organisation policy files over stack files.

Exit statuses: 0 clean (warnings allowed unless --strict), 1 errors (or invalid specs), 2 usage error or an
unreadable input (a missing file, a broken policy file, a base that cannot be read: with `--base`, a stack's
base is skipped only when the stack is new in the diff, i.e. its own path is missing at the base ref).
"""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from pathlib import Path

from rich.console import Console

from sandstack.policy import report as reports
from sandstack.policy.org import PolicyFile, load_policy_file
from sandstack.policy.runner import check
from sandstack.policy.sarif import to_sarif
from sandstack.review.sources import SourceError, opened
from sandstack.spec import SpecError, load_stack
from sandstack.spec.resolve import ResolvedStack


def _base_source(base: str, file: str) -> str:
    """`--base main` means git:main:<file>; `--base git:REF:PATH` or a file path is used as it is."""
    if base.startswith("git:") and base.count(":") >= 2:
        return base
    if base.startswith("git:"):
        base = base[4:]
    return base if base.endswith((".yaml", ".yml")) else f"git:{base}:{file}"


def _is_itself(source: str, file: str) -> bool:
    """Whether a base `git:REF:PATH` names the checked file's own path (PATH is read from the current directory,
    as `sandstack.review.sources` reads it): missing at REF, it is a stack the diff adds. Any other missing base
    (a mistyped or renamed path) is an error, never a silently skipped comparison."""
    ref, _, path = source.removeprefix("git:").partition(":")
    return source.startswith("git:") and bool(ref and path) and Path(path).resolve() == Path(file).resolve()


def run(args: argparse.Namespace, version: str) -> int:
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        files: list[PolicyFile] = [load_policy_file(p) for p in args.policy]
    except SpecError as error:
        for d in error.diagnostics:
            err.print(d.text(), style="red", markup=False)
        return 2
    bases: dict[str, ResolvedStack] = {}
    with ExitStack() as stack:
        if args.base:
            for file in args.files:
                source = _base_source(args.base, file)
                try:
                    bases[file] = load_stack(stack.enter_context(opened(source)))
                except SourceError as error:
                    missing = "does not exist at" in str(error)
                    if missing and _is_itself(source, file):
                        continue  # a stack new in the diff: nothing to compare its snapshots with
                    hint = (f" (the base of {file}: a missing base is skipped only for a stack new in the diff, "
                            f"whose own path is missing at the base ref; check the path)") if missing else ""
                    err.print(f"sandstack: --base: {error}{hint}", style="red", markup=False)
                    return 2
                except SpecError as error:
                    err.print(f"sandstack: --base {args.base} for {file} is not a valid spec:\n{error}",
                              style="red", markup=False)
                    return 2
        report = check(args.files, files, base=bases, suppressions=not args.no_suppressions)
    if args.format == "text":
        reports.to_text(report, Console(highlight=False, soft_wrap=True))
    elif args.format == "json":
        sys.stdout.write(reports.to_json(report))
    elif args.format == "github":
        sys.stdout.write(reports.to_github(report))
        err.print(reports.summary(report), markup=False)
    else:
        sys.stdout.write(to_sarif(report, version))
        err.print(reports.summary(report), markup=False)
    return report.exit_code(args.strict)
