"""Accepted changes: a pull request's reviewed, expected changes, with a reason each, that `--fail-on` lets pass.

They live in the stack's review file, `stacks/review/<stack>.yaml` (or the file `--accept` names): in a folder of
its own so that `stacks/*.yaml` (validate, check, the workflow's loop) never takes it for a stack; not in the stack: an acceptance is about one change from the base to the head, not part of the desired state, so it
neither shows up as a spec change itself nor renews anything, and once the change is merged the file is stale (the
diff warns: delete it). Like `check`'s suppressions, each entry names what it accepts, the category and a reason in
words; an entry that matches nothing is reported (a warning, an error with `--strict-accept`).

    accept:
      - change: templates.python.limits.memory   # a spec path; `*` matches one part, a prefix its fields
        category: disruption                     # security | disruption | data-loss | replace
        reason: the model needs 2GiB; sandboxes update in place
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

from sandstack.spec.errors import Diagnostic, SpecError, format_path
from sandstack.spec.loader import Document, load
from sandstack.spec.models.policy import REASON_WORD, has_a_word

# What `--fail-on` can fail on, and so what an acceptance can accept.
CATEGORIES = ("security", "disruption", "data-loss", "replace")
KEYS = ("change", "category", "reason")
REVIEW_FOLDER = "review"  # beside the stack files: stacks/review/<stack>.yaml


@dataclass(frozen=True)
class Acceptance:
    change: str  # a spec path or pattern: `templates.python.limits.memory`, `templates.*.network.allow`
    category: str
    reason: str
    file: str = ""
    line: int = 0
    column: int = 0

    def matches(self, path: str) -> bool:
        """`path` is the pattern, matches it part by part (`*` is one part), or is inside it (a field of it)."""
        parts, pattern = path.split("."), self.change.split(".")
        return len(parts) >= len(pattern) and all(fnmatch.fnmatchcase(p, q) for p, q in zip(parts, pattern))

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
        if "category" in entry and category not in CATEGORIES:
            errors.append(_error(doc, (*at, "category"),
                                 f"{category!r} is not one of {', '.join(repr(c) for c in CATEGORIES)}"))
        if "reason" in entry and not (isinstance(reason, str) and has_a_word(reason)):
            # The value is not shown: a reason is free text, and what it holds is the writer's.
            errors.append(_error(doc, (*at, "reason"), "not a valid reason: say why the change is accepted in "
                                 f"words (at least one word of {REASON_WORD} letters)"))
        if not errors:
            line, column = doc.position(at)
            out.append(Acceptance(change.strip(), category, reason.strip(), doc.file, line, column))
    if errors:
        raise SpecError(errors)
    return out
