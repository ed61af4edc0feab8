"""`sandstack preview` and `sandstack diff`: load the inputs, print the report, pick the exit status.

Exit statuses: 0 done (no --fail-on condition), 1 an input is not a valid spec or review file (its located errors
are printed; with --strict-accept, an acceptance that matches no change), 2 an input cannot be read (missing file,
ref or path), 3 a --fail-on condition triggered by a change no acceptance accepts, 4 (with --check-hosts) a host's
Docker daemon does not answer through its declared transport (each such host named on stderr; sandstack/tooling/reach.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from contextlib import ExitStack
from pathlib import Path

from sandstack.policy.credentials import flagged_texts
from sandstack.review import diff_markdown, diff_report, preview as preview_report
from sandstack.review.accept import beside, load_acceptances
from sandstack.review.categories import EXIT_FAIL_ON, EXIT_INVALID, Item, review as categorize
from sandstack.review.cost import cost as compute_cost, load_prices
from sandstack.review.diff import diff as compute_diff
from sandstack.review.diff_text import SHOWN
from sandstack.review.redact import redacted
from sandstack.review.resources import stack_resources
from sandstack.review.sources import SourceError, opened
from sandstack.spec import SpecError, load_stack
from sandstack.spec.resolve import ResolvedStack

EXIT_OK, EXIT_UNREADABLE, EXIT_UNREACHABLE = 0, 2, 4  # 1 and 3: sandstack.review.categories


class _Stop(Exception):
    def __init__(self, code: int):
        self.code = code


def _load(stack: ExitStack, source: str) -> ResolvedStack:
    try:
        path = stack.enter_context(opened(source))
    except SourceError as error:
        print(f"sandstack: {error}", file=sys.stderr)
        raise _Stop(EXIT_UNREADABLE) from None
    return _read("sandstack spec", path, load_stack, shown=source)


def _stack_name(explicit: str | None, source: str) -> str:
    return explicit or Path(source.rsplit(":", 1)[-1]).stem


def _unreachable(args: argparse.Namespace, spec: ResolvedStack) -> bool:
    """With --check-hosts: each host's daemon pinged, one line per host on stderr; whether one did not answer."""
    if not getattr(args, "check_hosts", False):
        return False
    from sandstack.tooling import reach

    try:
        config = reach.load_config(args.config)
    except (OSError, ValueError) as error:  # the file's name and where, never its content (sandstack.files)
        print(f"sandstack: --config {error}", file=sys.stderr)
        raise _Stop(EXIT_UNREADABLE) from None
    results = reach.check_hosts(spec.hosts, config, args.host_timeout)
    for result in results:
        print(f"sandstack: {result.text()}", file=sys.stderr)
    return any(r.error for r in results)


def preview(args: argparse.Namespace) -> int:
    try:
        with ExitStack() as stack:
            spec = _load(stack, args.spec)
            name = _stack_name(args.stack, args.spec)
            # Nothing `check` flags as a credential is printed, in any format.
            resources = redacted(stack_resources(spec, name), flagged_texts(spec))
            render = {"text": preview_report.to_text, "json": preview_report.to_json,
                      "markdown": preview_report.to_markdown}[args.format]
            sys.stdout.write(render(name, args.spec, resources))
            sys.stdout.flush()
            unreachable = _unreachable(args, spec)
    except _Stop as stop:
        return stop.code
    return EXIT_UNREACHABLE if unreachable else EXIT_OK


def _acceptances(args: argparse.Namespace) -> list:
    path = args.accept or beside(args.head)
    if path is None:
        return []
    try:
        return load_acceptances(path)
    except SpecError as error:
        if all(d.rule == "io" for d in error.diagnostics):  # not read at all (missing, a pipe, a device): one line
            print(f"sandstack: {path}: {error.diagnostics[0].message}", file=sys.stderr)
            raise _Stop(EXIT_UNREADABLE) from None
        print(f"{path} is not a valid review file:\n{error}", file=sys.stderr)
        raise _Stop(EXIT_INVALID) from None
    except OSError as error:
        print(f"sandstack: {path}: {error.strerror or error}", file=sys.stderr)
        raise _Stop(EXIT_UNREADABLE) from None


def _read(what: str, path: str, loader, shown: str | None = None):
    """A spec, policy file or price list, its located errors printed (exit 1) or its unreadable path named (exit 2);
    `shown`: how the user named it (a `git:REF:PATH` source read from a temporary file), else `path`."""
    shown = shown or path
    try:
        return loader(path)
    except SpecError as error:
        print(f"{shown} is not a valid {what}:\n{error}", file=sys.stderr)
        raise _Stop(EXIT_INVALID) from None
    except OSError as error:
        print(f"sandstack: {shown}: {error.strerror or error}", file=sys.stderr)
        raise _Stop(EXIT_UNREADABLE) from None


def _bounds(args: argparse.Namespace, old: ResolvedStack, new: ResolvedStack) -> tuple[list[Item], str | None]:
    """The organisation's capacity bounds the change exceeds, as `capacity` items naming their rule, and the price
    list's path (--prices, else the first policy file's `prices:`)."""
    from sandstack.policy.org import change_violations, load_policy_file

    files = [_read("policy file", path, load_policy_file) for path in args.policy]
    items = [Item("capacity", f"{org.rule.id} {org.rule.name}: {message}", (),
                  where=f"{org.rule.source}:{org.at[0]}:{org.at[1]}")
             for org, message in change_violations(old, new, files)]
    return items, args.prices or next((f.prices for f in files if f.prices), None)


def diff(args: argparse.Namespace) -> int:
    try:
        with ExitStack() as stack:
            old = _load(stack, args.base)
            new = _load(stack, args.head)
            acceptances = _acceptances(args)
            bounds, prices = _bounds(args, old, new)
            result = redacted(compute_diff(old, new, _stack_name(args.stack, args.head)),
                              flagged_texts(old) | flagged_texts(new))
            if prices is not None:
                result = dataclasses.replace(result, cost=compute_cost(old, new, _read("price list", prices,
                                                                                        load_prices)))
            review = categorize(result, acceptances, bounds)
            verdict = review.verdict(args.fail_on, args.strict_accept)
            render = {"text": diff_report.to_text, "json": diff_report.to_json,
                      "markdown": diff_markdown.to_markdown}[args.format]
            sys.stdout.write(render(result, args.base, args.head, review, verdict))
            sys.stdout.flush()
            unreachable = _unreachable(args, new)
    except _Stop as stop:
        return stop.code
    level = "error" if args.strict_accept else "warning"
    for a in review.stale:
        print(f"{a.where}: {level}: acceptance of {a.change!r} ({a.category}) matches no change: remove it",
              file=sys.stderr)
    if verdict.stale:
        return EXIT_INVALID
    for kind in verdict.failed:
        items = [i for i in verdict.items if i.category == kind]
        # A few named, the rest counted: a 1,000-sandbox replace would otherwise print 1,000 lines.
        for item in items[:SHOWN]:
            print(f"sandstack: --fail-on {kind}: {item.text}", file=sys.stderr)
        if len(items) > SHOWN:
            print(f"sandstack: --fail-on {kind}: … and {len(items) - SHOWN} more not accepted", file=sys.stderr)
    # A host that cannot be reached stops `pulumi up` before any --fail-on matters.
    return EXIT_UNREACHABLE if unreachable else verdict.status


