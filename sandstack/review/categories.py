"""Every change of a diff sorted into the review's categories, with what `--fail-on` fails on and what is accepted.

A spec change's category comes from its field's two declarations (sandstack.spec.access.category: `access=` and
`change=`): security, capacity, disruption or cosmetic. What `--fail-on` counts is what the diff does:
- `security`: a security finding that loosens (sandstack.review.security), accepted through an acceptance of
  category `security` matching a spec change of the finding's pool;
- `capacity`: a pool reserving more of its hosts, warm or at its on-demand ceiling (sandstack.review.capacity),
  accepted through the capacity changes of the pool; and an organisation's bound on a stack's or a host's total or
  on a change's size exceeded (sandstack.policy.org), which the pull request cannot accept (the bound is the
  organisation's: it changes the policy file);
- `disruption`: sandboxes replaced or destroyed, a host service renewed or deleted, data lost;
- `data-loss`: a volume holding what users or services wrote (sandstack.review.impact.HOLDS) replaced or deleted;
- `replace`: any resource replaced or deleted (the engine's word);
each of the last three accepted when every spec change explaining it is matched by an acceptance of that category
(a change no declared effect explains cannot be accepted). An acceptance matching nothing is stale.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

from sandstack.review.accept import CATEGORIES as FAIL_ON, Acceptance
from sandstack.review.capacity import grown as capacity_words
from sandstack.review.diff import COMPONENT_TYPE, Diff, FieldChange, ResourceChange
from sandstack.review.impact import HOLDS, INTERRUPTS
from sandstack.review.security import Finding
from sandstack.spec.access import category
from sandstack.spec.models import Stack
from sandstack.spec.models.base import access_of, change_of
from sandstack.spec.walk import model_fields

__all__ = ["FAIL_ON", "Item", "Review", "field_category", "review"]


@cache
def _declared() -> list[tuple[re.Pattern, str]]:
    out = []
    for path, info in model_fields(Stack).items():
        pattern = re.escape(path).replace(r"\*", r"[^.]+").replace(r"\[\]", r"\.[0-9]+")
        out.append((re.compile(f"^{pattern}$"), category(access_of(info), change_of(info))))
    return out


def field_category(path: str) -> str:
    """The category of the field at a concrete spec path (a map entry's: its nearest declared field above)."""
    parts = path.split(".")
    while parts:
        probe = ".".join(parts)
        for pattern, value in _declared():
            if pattern.match(probe):
                return value
        parts.pop()
    raise KeyError(path)


@dataclass(frozen=True)
class Item:
    """One thing `--fail-on CATEGORY` counts: a looser finding, or a resource change, with its acceptance."""

    category: str  # one of FAIL_ON
    text: str
    paths: tuple[str, ...]  # the spec changes behind it
    accepted: Acceptance | None = None
    where: str = ""  # an organisation bound's rule, file:line:col: never accepted by a review file

    def to_json(self) -> dict:
        return {"category": self.category, "text": self.text, "paths": list(self.paths),
                "accepted": None if self.accepted is None else {"change": self.accepted.change,
                                                                "reason": self.accepted.reason},
                "rule": self.where or None}


@dataclass
class Review:
    items: list[Item]
    stale: list[Acceptance] = field(default_factory=list)

    def failing(self, fail_on: list[str]) -> list[Item]:
        return [i for i in self.items if i.category in fail_on and i.accepted is None]

    def accepted(self) -> list[Item]:
        return [i for i in self.items if i.accepted is not None]

    def remaining(self) -> list[tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]]:
        """Per change an acceptance names that accepted something: (the change, where its acceptances are written,
        the categories accepted, those its changes still fall in, not accepted): an acceptance of `security` for a
        change that also restarts sandboxes leaves `disruption`."""
        by_change: dict[str, list[Acceptance]] = {}
        for i in self.items:
            if i.accepted is not None and i.accepted not in by_change.get(i.accepted.change, []):
                by_change.setdefault(i.accepted.change, []).append(i.accepted)
        out = []
        for change, accs in by_change.items():
            done = tuple(dict.fromkeys(i.category for i in self.items if i.accepted in accs))
            left = tuple(dict.fromkeys(i.category for i in self.items if i.accepted is None and not i.where
                                       and i.category not in done and any(a.matches(p) for a in accs
                                                                          for p in i.paths)))
            if left:
                out.append((change, tuple(a.where for a in accs), done, left))
        return out

    def verdict(self, fail_on: list[str], strict: bool = False) -> Verdict:
        """What `--fail-on` (and `--strict-accept`) decide: the exit status the command returns for them."""
        items = self.failing(fail_on)
        failing = {i.category for i in items}
        asked = tuple(dict.fromkeys(fail_on))
        stale = strict and bool(self.stale)
        return Verdict(asked, tuple(c for c in asked if c in failing), tuple(c for c in asked if c not in failing),
                       tuple(items), EXIT_INVALID if stale else EXIT_FAIL_ON if items else 0, stale)


EXIT_INVALID, EXIT_FAIL_ON = 1, 3  # sandstack.tooling.review's exit statuses for these two


@dataclass(frozen=True)
class Verdict:
    """Why CI is red (or green): the categories `--fail-on` named, which failed with the items not accepted, and
    the exit status; `stale`: `--strict-accept` and an acceptance matching no change (exit 1)."""

    fail_on: tuple[str, ...]
    failed: tuple[str, ...]
    passed: tuple[str, ...]
    items: tuple[Item, ...]
    status: int
    stale: bool = False

    def headline(self) -> str:
        asked = ", ".join(self.fail_on)
        if self.stale:
            return (f"fails (exit {self.status}): --strict-accept and an acceptance matches no change (see Stale "
                    "acceptances)")
        if not self.failed:
            return f"passes: --fail-on {asked}"
        return (f"fails (exit {self.status}): --fail-on {', '.join(self.failed)}"
                + (f"; passes: {', '.join(self.passed)}" if self.passed else ""))

    def to_json(self) -> dict:
        return {"fail_on": list(self.fail_on), "failed": list(self.failed), "passed": list(self.passed),
                "exit": self.status, "stale_acceptances_fail": self.stale,
                "items": [i.to_json() for i in self.items]}


def _match(acceptances: list[Acceptance], kind: str, paths: tuple[str, ...], used: set[int]) -> Acceptance | None:
    """The acceptance of `kind` matching every path (the first that matches each); None if one path is not."""
    if not paths:
        return None
    found = []
    for path in paths:
        hit = next(((i, a) for i, a in enumerate(acceptances) if a.accepts(kind) and a.matches(path)), None)
        if hit is None:
            return None
        found.append(hit)
    used.update(i for i, _ in found)
    return found[0][1]


def _finding_paths(f: Finding, fields: list[FieldChange], pools: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The security-category spec changes of the finding's pool: what accepting the finding names (every change of
    the pool when none is one: a reference, such as the pool's template, that loosens through what it resolves to)."""
    of_pool = [c.path for c in fields if f.pool in pools.get(c.path, ())]
    return tuple(p for p in of_pool if field_category(p) == "security") or tuple(of_pool)


def _disrupts(c: ResourceChange) -> bool:
    kind = c.resource.kind
    if c.reload:  # a role taking a configuration in place interrupts nothing
        return False
    return (c.action in ("replace", "delete") and kind in ("sandbox", *INTERRUPTS, *HOLDS)) or (
        c.action == "update" and kind in INTERRUPTS)


def _pool_paths(pool: str, fields: list[FieldChange], pools: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The capacity-category spec changes of a pool; when none is, the pool's own entry (a pool added, a template
    switched: `pools.X`, what the reviewer accepts), else every change of the pool."""
    of_pool = [c.path for c in fields if pool in pools.get(c.path, ())]
    return (tuple(p for p in of_pool if field_category(p) == "capacity")
            or tuple(p for p in of_pool if p == f"pools.{pool}" or p.startswith(f"pools.{pool}."))
            or tuple(of_pool))


def review(diff: Diff, acceptances: list[Acceptance], bounds: list[Item] | None = None) -> Review:
    """`bounds`: the organisation's capacity bounds the change exceeds (sandstack.policy.org), as items."""
    used: set[int] = set()
    items: list[Item] = []
    for f in diff.security:
        if f.loosens:
            paths = _finding_paths(f, diff.fields, diff.field_pools)
            items.append(Item("security", f"pool {f.pool}: {f.text}", paths,
                              _match(acceptances, "security", paths, used)))
    for row in diff.reserved.pools if diff.reserved is not None else ():
        grows = row.grows()
        if grows:
            paths = _pool_paths(row.name, diff.fields, diff.field_pools)
            items.append(Item("capacity", f"pool {row.name}: {capacity_words(row)}", paths,
                              _match(acceptances, "capacity", paths, used)))
    items += bounds or []
    for c in diff.changes:
        if c.resource.type.startswith(COMPONENT_TYPE):
            continue
        paths = tuple(dict.fromkeys(r.path for r in c.reasons))
        text = f"{c.resource.kind} {c.resource.name} {c.shown}"
        kinds = []
        if c.shown in ("replace", "delete"):
            kinds.append("replace")
        if _disrupts(c):
            kinds.append("disruption")
        if c.action in ("replace", "delete") and c.resource.kind in HOLDS:
            kinds.append("data-loss")
        items += [Item(k, text, paths, _match(acceptances, k, paths, used)) for k in kinds]
    stale = [a for i, a in enumerate(acceptances) if i not in used]
    return Review(items, stale)
