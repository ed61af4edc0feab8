"""The spec layer: models, schema, loader, rules and errors. Imports nothing from Pulumi.

`check_file` runs every validation layer and returns all diagnostics at once; `load_stack` is
what the Pulumi program calls, so `pulumi up` fails with the same messages as `sandstack validate`.
`check_data` and `load_data` do the same for a spec given as an object (the mapping a spec file parses to, or a
`Stack` model), with diagnostics located by JSON path: `<object>: $.templates.t.user: …`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from sandstack.spec.addresses import lock_beside
from sandstack.spec.errors import Diagnostic, SpecError
from sandstack.spec.inherit import expand, extends_diagnostics
from sandstack.spec.loader import MAX_FILE_BYTES, Document, from_data, load, parse
from sandstack.spec.models import Stack
from sandstack.spec.resolve import ResolvedStack, resolve_stack
from sandstack.spec.rules import Context, run_rules
from sandstack.spec.schema_errors import schema_diagnostics

__all__ = ["CheckResult", "Diagnostic", "OBJECT", "ResolvedStack", "SpecError", "Stack", "check_data", "check_file",
           "check_text", "load_data", "load_stack", "load_text"]

OBJECT = "<object>"  # the name diagnostics give a spec that is not a file


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


def check_file(path: str | os.PathLike[str], display: str | None = None, *, lock: bool = True) -> CheckResult:
    """Every layer in order: parse → JSON Schema → models → inheritance → semantic rules → resolution, then the
    address lock beside the file (`<spec>.lock`, sandstack.spec.addresses), unless `lock` is False (what
    `sandstack lock` reads to write it). A stale or hand-edited lock's diagnostics are located in the lock.

    A layer runs only when the one before it passed, so one mistake is reported once.
    """
    try:
        doc = load(path, display)
    except SpecError as exc:
        return CheckResult(exc.diagnostics, None)
    result = _check(doc, Path(path))
    if result.stack is None or not lock:
        return result
    addresses, problems = lock_beside(Path(path), display, result.stack)
    if problems:
        return CheckResult(sorted(set(problems)), None, doc)
    return dataclasses.replace(result, stack=dataclasses.replace(result.stack, addresses=addresses))


def check_data(data: Mapping[str, object] | Stack, source_dir: str | os.PathLike[str],
               name: str = OBJECT) -> CheckResult:
    """The layers of `check_file` on a spec given as an object: the mapping a spec file parses to (a copy is
    checked, from the schema on), or a `Stack` the models validated (`Stack.model_validate`; checked from the
    inheritance layer on). Relative paths in it (snapshot files, data mounts) are read from `source_dir`, as a
    file's are from its folder; diagnostics name `name` and the JSON path."""
    source = Path(source_dir) / name
    if isinstance(data, Stack):
        return _check(Document(name, data.model_dump(mode="json", exclude_unset=True), located=False), source, data)
    try:
        doc = from_data(data, name)
    except SpecError as exc:
        return CheckResult(exc.diagnostics, None)
    return _check(doc, source)


def check_text(text: str, source_dir: str | os.PathLike[str], name: str) -> CheckResult:
    """The layers of `check_file` on spec text that is not read from a file (a Pulumi program's input): diagnostics
    name `name` with line and column; relative paths in it are read from `source_dir`. Capped in size as a file is."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
        message = f"is larger than the {MAX_FILE_BYTES // 1024} KiB limit for a spec file"
        return CheckResult([Diagnostic(name, 1, 1, "$", message, "size")], None)
    try:
        doc = parse(text, name)
    except SpecError as exc:
        return CheckResult(exc.diagnostics, None)
    return _check(doc, Path(source_dir) / name)


def _check(doc: Document, source: Path, stack: Stack | None = None) -> CheckResult:
    """Schema → models → inheritance → semantic rules → resolution on a parsed document (from inheritance on
    for a validated `stack`); `source` is the spec file (its folder holds the files the spec names)."""
    if stack is None:
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
    written = stack
    stack = expand(stack)  # every later layer sees each template whole (extends, defaults' image and snapshot)
    diagnostics = run_rules(Context(doc, stack, source))
    if diagnostics:
        return CheckResult(sorted(set(diagnostics)), None)
    return CheckResult([], dataclasses.replace(resolve_stack(stack, source), written_spec=written), doc)


def load_stack(path: str | os.PathLike[str], display: str | None = None) -> ResolvedStack:
    """The validated, resolved stack, or SpecError carrying every diagnostic."""
    result = check_file(path, display)
    if result.stack is None:
        raise SpecError(result.diagnostics)
    return result.stack


def load_text(text: str, source_dir: str | os.PathLike[str], name: str) -> ResolvedStack:
    """The validated, resolved stack of spec text (see `check_text`), or SpecError carrying every diagnostic."""
    result = check_text(text, source_dir, name)
    if result.stack is None:
        raise SpecError(result.diagnostics)
    return result.stack


def load_data(data: Mapping[str, object] | Stack, source_dir: str | os.PathLike[str],
              name: str = OBJECT) -> ResolvedStack:
    """The validated, resolved stack of a spec given as an object (see `check_data`), or SpecError carrying
    every diagnostic, each located by its JSON path."""
    result = check_data(data, source_dir, name)
    if result.stack is None:
        raise SpecError(result.diagnostics)
    return result.stack
