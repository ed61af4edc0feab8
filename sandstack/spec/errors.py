"""Located diagnostics: one record type for parse, schema and semantic errors, three renderings.

`stacks/dev.yaml:12:7: $.templates.python.limits.memory: '9GiB' exceeds host 'local' …`
is the text form; the same records render as JSON and as GitHub `::error` annotations.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

from sandstack.spec.credentials import redact

PathPart = str | int
JsonPath = tuple[PathPart, ...]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def format_path(path: Sequence[PathPart]) -> str:
    """('templates', 'py', 'ports', 0) → `$.templates.py.ports[0]`; odd keys go in brackets."""
    out = "$"
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENT.match(part):
            out += f".{part}"
        else:
            out += "[" + json.dumps(part) + "]"
    return out


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One problem in one file. Field order is the sort order: by file, then position."""

    file: str
    line: int
    column: int
    path: str
    message: str
    rule: str

    def __post_init__(self) -> None:
        # One place for every message in every format: a value that may be a secret is never printed (URL
        # userinfo, anything detect-secrets takes for a credential), whichever layer wrote the message.
        object.__setattr__(self, "message", redact(self.message))
        object.__setattr__(self, "path", redact(self.path))

    @property
    def located(self) -> bool:
        """Whether the diagnostic has a line and column: a spec given as an object has only its JSON path."""
        return self.line > 0

    def text(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}" if self.located else self.file
        return f"{where}: {self.path}: {self.message}"

    def github(self) -> str:
        # GitHub workflow commands: properties escape % \r \n : , and the message escapes % \r \n.
        def prop(value: str) -> str:
            return _gh_escape(value).replace(":", "%3A").replace(",", "%2C")

        title = prop(f"sandstack {self.rule}")
        position = f",line={self.line},col={self.column}" if self.located else ""
        return (
            f"::error file={prop(self.file)}{position},title={title}::"
            f"{_gh_escape(self.path + ': ' + self.message)}"
        )

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _gh_escape(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


class SpecError(Exception):
    """A spec that cannot be used. Carries every diagnostic found, sorted by position."""

    def __init__(self, diagnostics: Iterable[Diagnostic]):
        self.diagnostics = sorted(set(diagnostics))
        super().__init__("\n".join(d.text() for d in self.diagnostics))


def render(diagnostics: Sequence[Diagnostic], fmt: str) -> str:
    """All diagnostics in one of the output formats: 'text', 'json' or 'github'."""
    if fmt == "json":
        return json.dumps([d.as_dict() for d in diagnostics], indent=2)
    if fmt == "github":
        return "\n".join(d.github() for d in diagnostics)
    return "\n".join(d.text() for d in diagnostics)
