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
from sandstack.spec.inherit import expand, extends_diagnostics
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
    document: Document | None = None  # the parsed file, with where each key and value stands (policy checks)

    @property
    def unreadable(self) -> bool:
        """The file could not be opened at all (exit 2), as opposed to being an invalid spec (exit 1)."""
        return any(d.rule == "io" for d in self.diagnostics)


def _data_path(data: object, loc: tuple) -> tuple:
    """A pydantic error location as a path in the file's data.

    Inside a union (`limits: small | {profile: …}`) pydantic adds the branch's name to `loc`
    ('LimitsOverride', 'constrained-str'); those parts are not keys in the data and are dropped.
    """
    out: list = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            continue
        out.append(part)
    return tuple(out)


def _model_diagnostics(doc: Document, exc: ValidationError) -> list[Diagnostic]:
    errors = exc.errors()
    # The JSON Schema layer already checked every type, so a type error here comes from a union branch
    # the value does not take (the name branch of `limits: {memory: …}`); the branch it takes says why.
    relevant = [err for err in errors if not err["type"].endswith("_type")] or errors
    out = []
    for err in relevant:
        message = err["msg"].removeprefix("Value error, ")
        out.append(doc.diagnostic(_data_path(doc.data, tuple(err["loc"])), message, "schema"))
    return out


def check_file(path: str | os.PathLike[str], display: str | None = None) -> CheckResult:
    """Every layer in order: parse → JSON Schema → models → inheritance → semantic rules → resolution.

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
    diagnostics = list(extends_diagnostics(doc, stack))
    if diagnostics:
        return CheckResult(sorted(set(diagnostics)), None)
    stack = expand(stack)  # every later layer sees each template whole (extends, defaults' image and snapshot)
    diagnostics = run_rules(Context(doc, stack, Path(path)))
    if diagnostics:
        return CheckResult(sorted(set(diagnostics)), None)
    return CheckResult([], resolve_stack(stack, Path(path)), doc)


def load_stack(path: str | os.PathLike[str], display: str | None = None) -> ResolvedStack:
    """The validated, resolved stack, or SpecError carrying every diagnostic."""
    result = check_file(path, display)
    if result.stack is None:
        raise SpecError(result.diagnostics)
    return result.stack
