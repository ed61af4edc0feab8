"""Rules and what they find: the vocabulary every policy module, report and the CrossGuard pack share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from sandstack.spec.credentials import redact

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Rule:
    id: str  # SBX-<AREA>-NNN (built-in) or the organisation's own
    name: str  # kebab-case
    description: str  # "Checks whether …"
    severity: Severity
    remediation: str
    source: str = "built-in"  # or the policy file that declares it


@dataclass(frozen=True)
class Violation:
    """What a rule found, before it is located in the file: the target, the JSON path at fault, the message."""

    rule: str
    target: str  # template/<name>, pool/<name>, host/<name> or stack
    path: tuple  # JSON path in the stack file (the nearest existing node is reported)
    message: str
    remediation: str | None = None  # when this case has its own fix (a url port), else the rule's


@dataclass(frozen=True, order=True)
class Finding:
    file: str
    line: int
    column: int
    rule: str
    severity: str
    target: str
    path: str
    message: str
    remediation: str = ""
    suppressed: str | None = field(default=None, compare=False)  # the suppression's reason

    def __post_init__(self) -> None:
        # Every format prints the message and the reason: whatever in them may be a secret is never shown.
        object.__setattr__(self, "message", redact(self.message))
        if self.suppressed is not None:
            object.__setattr__(self, "suppressed", redact(self.suppressed))

    def text(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: {self.severity} {self.rule}: {self.message}"
