"""Accepted changes: a pull request's reviewed, expected changes, with a reason each, that `--fail-on` lets pass.

They live in the stack's review file, `stacks/review/<stack>.yaml` (or the file `--accept` names): in a folder of
its own so that `stacks/*.yaml` (validate, check, the workflow's loop) never takes it for a stack; not in the stack: an acceptance is about one change from the base to the head, not part of the desired state, so it
neither shows up as a spec change itself nor renews anything, and once the change is merged the file is stale (the
diff warns: delete it). Like `check`'s suppressions, each entry names what it accepts, the category and a reason in
words; an entry that matches nothing is reported (a warning, an error with `--strict-accept`).

    accept:
      - change: templates.python.limits.memory   # a spec path; `*` matches one part, a prefix its fields
        category: [capacity, disruption]         # one, a list, or `all`: security | capacity | disruption |
        reason: the model needs 2GiB             #   data-loss | replace
      - change: templates.python.network.allow
        category: all                            # every category this change falls in
        reason: pypi.org for pip installs, reviewed by the platform team

One change is accepted once, for the categories it names: a change that also falls in a category the entry does not
name still fails `--fail-on` for that one, and the review says which categories remain.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

from sandstack.spec.access import ACCEPT_ALL as ALL, FAIL_ON as CATEGORIES
from sandstack.spec.errors import Diagnostic, SpecError, format_path
from sandstack.spec.loader import Document, load
from sandstack.spec.models.policy import REASON_WORD, has_a_word

KEYS = ("change", "category", "reason")
REVIEW_FOLDER = "review"  # beside the stack files: stacks/review/<stack>.yaml


@dataclass(frozen=True)
class Acceptance:
    change: str  # a spec path or pattern: `templates.python.limits.memory`, `templates.*.network.allow`
    categories: tuple[str, ...]  # what it accepts, in CATEGORIES' order (`all`: every one)
    reason: str
    file: str = ""
    line: int = 0
    column: int = 0

    def matches(self, path: str) -> bool:
        """`path` is the pattern, matches it part by part (`*` is one part), or is inside it (a field of it)."""
        parts, pattern = path.split("."), self.change.split(".")
        return len(parts) >= len(pattern) and all(fnmatch.fnmatchcase(p, q) for p, q in zip(parts, pattern))

    @property
    def category(self) -> str:
        """The categories as written for a reader: `security`, `capacity, disruption`, `all`."""
        return ALL if self.categories == CATEGORIES else ", ".join(self.categories)

    def accepts(self, kind: str) -> bool:
        return kind in self.categories

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


def beside(stack_file: str) -> Path | None:
    """The review file of a stack given as a plain file (`stacks/dev.yaml` → `stacks/review/dev.yaml`), if any."""
    if stack_file.startswith("git:"):
        return None
    path = Path(stack_file)
    candidate = path.parent / REVIEW_FOLDER / path.name
    return candidate if candidate.is_file() else None


def _error(doc: Document, path: tuple, message: str, key: bool = False) -> Diagnostic:
    line, column = doc.position(path, key=key)
    return Diagnostic(doc.file, line, column, format_path(path), message, "review-file")


def _categories(doc: Document, at: tuple, value: object, errors: list[Diagnostic]) -> tuple[str, ...]:
    """`category`: one category, a list of them, or `all`; each bad one located with what is allowed."""
    allowed = ", ".join(repr(c) for c in CATEGORIES)
    if value == ALL:
        return CATEGORIES
    values = value if isinstance(value, list) else [value]
    if not values:
        errors.append(_error(doc, at, f"an empty list accepts nothing: name one or more of {allowed}, or 'all'"))
    for i, kind in enumerate(values):
        if kind not in CATEGORIES:
            where = (*at, i) if isinstance(value, list) else at
            errors.append(_error(doc, where, f"{kind!r} is not one of {allowed} (or 'all' alone)"))
    return tuple(c for c in CATEGORIES if c in values)


def load_acceptances(path: str | Path) -> list[Acceptance]:
    """The file's acceptances; every problem at once as a SpecError of located diagnostics (file:line:col, the
    JSON path, the bad key or value and what is allowed; a reason's text is never printed)."""
    doc = load(path, what="a review file")
    data, errors = doc.data, []
    if not isinstance(data, dict) or set(data) - {"accept"}:
        extra = sorted(set(data) - {"accept"}) if isinstance(data, dict) else []
        where = ("accept",) if not extra else (extra[0],)
        raise SpecError([_error(doc, where, f"unknown key {extra[0]!r}: a review file holds only 'accept'" if extra
                                else "a review file is a mapping with one key, 'accept'", key=bool(extra))])
    entries = data.get("accept") or []
    if not isinstance(entries, list):
        raise SpecError([_error(doc, ("accept",), "'accept' is a list of {change, category, reason} entries")])
    out = []
    for i, entry in enumerate(entries):
        at = ("accept", i)
        if not isinstance(entry, dict):
            errors.append(_error(doc, at, "an entry is a mapping with 'change', 'category' and 'reason'"))
            continue
        for key in sorted(set(entry) - set(KEYS)):
            errors.append(_error(doc, (*at, key), f"unknown key {key!r}: allowed are {', '.join(KEYS)}", key=True))
        for key in KEYS:
            if key not in entry:
                errors.append(_error(doc, at, f"missing {key!r}"))
        change, category, reason = entry.get("change"), entry.get("category"), entry.get("reason")
        if "change" in entry and (not isinstance(change, str) or not change.strip() or " " in change.strip()):
            errors.append(_error(doc, (*at, "change"), f"{change!r} is not a spec path or pattern (e.g. "
                                 "'templates.python.limits.memory', 'templates.*.network.allow')"))
        kinds = _categories(doc, (*at, "category"), category, errors) if "category" in entry else ()
        if "reason" in entry and not (isinstance(reason, str) and has_a_word(reason)):
            # The value is not shown: a reason is free text, and what it holds is the writer's.
            errors.append(_error(doc, (*at, "reason"), "not a valid reason: say why the change is accepted in "
                                 f"words (at least one word of {REASON_WORD} letters)"))
        if not errors:
            line, column = doc.position(at)
            out.append(Acceptance(change.strip(), kinds, reason.strip(), doc.file, line, column))
    if errors:
        raise SpecError(errors)
    return out
