"""The spec layer: models, schema, loader, rules and errors. Imports nothing from Pulumi.

`check_file` runs every validation layer and returns all diagnostics at once; `load_stack` is
what the Pulumi program calls, so `pulumi up` fails with the same messages as `sandstack validate`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from sandstack.spec.errors import Diagnostic, SpecError
from sandstack.spec.loader import Document, load
from sandstack.spec.models import Stack
from sandstack.spec.resolve import ResolvedStack, resolve_stack
from sandstack.spec.rules import Context, run_rules
from sandstack.spec.schema_errors import schema_diagnostics

__all__ = ["CheckResult", "Diagnostic", "ResolvedStack", "SpecError", "check_file", "load_stack"]


@dataclass
class CheckResult:
    diagnostics: list[Diagnostic]
    stack: ResolvedStack | None

    @property
    def unreadable(self) -> bool:
        """The file could not be opened at all (exit 2), as opposed to being an invalid spec (exit 1)."""
        return any(d.rule == "io" for d in self.diagnostics)


def _model_diagnostics(doc: Document, exc: ValidationError) -> list[Diagnostic]:
    out = []
    for err in exc.errors():
        message = err["msg"].removeprefix("Value error, ")
        out.append(doc.diagnostic(tuple(err["loc"]), message, "schema"))
    return out


def check_file(path: str | os.PathLike[str], display: str | None = None) -> CheckResult:
    """Every layer in order: parse → JSON Schema → models → semantic rules → resolution.

    A layer runs only when the one before it passed, so one mistake is reported once.
    """
    try:
        doc = load(path, display)
    except SpecError as exc:
        return CheckResult(exc.diagnostics, None)
    diagnostics = schema_diagnostics(doc)
    if diagnostics:
        return CheckResult(sorted(set(diagnostics)), None)
    try:
        stack = Stack.model_validate(doc.data)
    except ValidationError as exc:
        return CheckResult(sorted(set(_model_diagnostics(doc, exc))), None)
    diagnostics = run_rules(Context(doc, stack, Path(path)))
    if diagnostics:
        return CheckResult(sorted(set(diagnostics)), None)
    return CheckResult([], resolve_stack(stack, Path(path)))


def load_stack(path: str | os.PathLike[str], display: str | None = None) -> ResolvedStack:
    """The validated, resolved stack, or SpecError carrying every diagnostic."""
    result = check_file(path, display)
    if result.stack is None:
        raise SpecError(result.diagnostics)
    return result.stack
