"""Whether changing a spec field loosens access: the access table, declared beside the change table.

Every model field declares, beside its change effect, `field(..., access=...)`: one of
- `NEVER`: no value of it widens what a sandbox, or anyone reaching one, may do;
- `loosens(area, when, before, after)`: a change loosens access when it does what `when` says; `before` →
  `after` is one such change, which tests/review/test_security.py applies to the field at every path it has and
  asserts that the security summary (sandstack.review.security) names a loosening in `area`;
- `AS_FIELDS`: a block, which loosens as the fields it holds do (each declares its own);
- `AS_RESOLVED`: a reference (a profile, a template, `extends`), which loosens as the values it resolves to do;
- `capacity(when)`: a share of the host (CPUs, memory, disk, replicas): raising it gives the sandboxes more room,
  not more access, so the review sorts it into the capacity category, never as a loosening. `pids` and
  `open_files` stay loosenings: they are the fork-bomb and open-connection bounds, not a share of the host.
Each field's review category (`category`: security, capacity, disruption, cosmetic) follows from this declaration
and its change effect, in one place: `category` below (tests/review/test_categories.py checks every field).
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
    kind: Literal["never", "loosens", "fields", "resolved", "capacity"]
    area: str = ""  # for 'loosens': the summary's area
    when: str = ""  # in words: when a change loosens access
    widen: tuple[Any, Any] = (None, None)  # for 'loosens': one change that does (the value before, after)

    def __post_init__(self) -> None:
        if (self.kind == "loosens") != (self.area in AREAS):
            raise ValueError(f"a loosening names one of the areas {AREAS}, and only a loosening does: {self!r}")

    @property
    def label(self) -> str:
        return {"never": "never", "fields": "as its fields", "resolved": "as what it resolves to",
                "capacity": f"capacity: {self.when}"}.get(
            self.kind, f"{self.area}: {self.when}")


NEVER = Access("never")
AS_FIELDS = Access("fields")
AS_RESOLVED = Access("resolved")


def loosens(area: str, when: str, before: Any, after: Any) -> Access:
    return Access("loosens", area, when, (before, after))


def capacity(when: str) -> Access:
    return Access("capacity", when=when)


# The review's categories of a changed field (sandstack.review.categories): security (a declared loosening; the
# security summary says looser or tighter), capacity (a share of the host), disruption (its declared effect renews
# something: sandboxes, a snapshot, a volume or a host service) and cosmetic (its effect is none).
CATEGORIES = ("security", "capacity", "disruption", "cosmetic")
# What `sandstack diff --fail-on` can fail on, and so what a review file's acceptance can accept (`all`: each): the
# categories above but cosmetic, and two of what the diff does (a volume's data lost, any resource replaced).
FAIL_ON = ("security", "capacity", "disruption", "data-loss", "replace")
ACCEPT_ALL = "all"


def category(access: Access, effect: object) -> str:
    """A field's review category from its two declarations: `access=` and `change=` (an Effect)."""
    if access.kind == "loosens":
        return "security"
    if access.kind == "capacity":
        return "capacity"
    quiet = (getattr(effect, "sandboxes") == "none" and getattr(effect, "snapshot") == "none"
             and not any(getattr(effect, a) for a in ("secrets", "data", "workspaces", "host", "when")))
    return "cosmetic" if quiet else "disruption"
