"""Whether changing a spec field loosens access: the access table, declared beside the change table.

Every model field declares, beside its change effect, `field(..., access=...)`: one of
- `NEVER`: no value of it widens what a sandbox, or anyone reaching one, may do;
- `loosens(area, when, before, after)`: a change loosens access when it does what `when` says; `before` →
  `after` is one such change, which tests/review/test_security.py applies to the field at every path it has and
  asserts that the security summary (sandstack.review.security) names a loosening in `area`;
- `AS_FIELDS`: a block, which loosens as the fields it holds do (each declares its own);
- `AS_RESOLVED`: a reference (a profile, a template, `extends`), which loosens as the values it resolves to do.
The summary compares the resolved templates and hosts, so a value a template inherits (from `defaults`, a
profile or a parent template) is named on each pool it reaches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

# The security summary's areas (sandstack.review.security.Finding.area).
AREAS = ("egress", "limits", "ports", "privileges", "lifetime", "secrets", "pool", "filesystem", "runtime",
         "ingress")


@dataclass(frozen=True)
class Access:
    kind: Literal["never", "loosens", "fields", "resolved"]
    area: str = ""  # for 'loosens': the summary's area
    when: str = ""  # in words: when a change loosens access
    widen: tuple[Any, Any] = (None, None)  # for 'loosens': one change that does (the value before, after)

    def __post_init__(self) -> None:
        if (self.kind == "loosens") != (self.area in AREAS):
            raise ValueError(f"a loosening names one of the areas {AREAS}, and only a loosening does: {self!r}")

    @property
    def label(self) -> str:
        return {"never": "never", "fields": "as its fields", "resolved": "as what it resolves to"}.get(
            self.kind, f"{self.area}: {self.when}")


NEVER = Access("never")
AS_FIELDS = Access("fields")
AS_RESOLVED = Access("resolved")


def loosens(area: str, when: str, before: Any, after: Any) -> Access:
    return Access("loosens", area, when, (before, after))
