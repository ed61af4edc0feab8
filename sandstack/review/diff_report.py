"""The diff in words: the security summary first, then snapshot rebuilds, then what happens on each host."""

from __future__ import annotations

import json
from itertools import groupby

from sandstack.review import diff_text
from sandstack.review.categories import Review, field_category
from sandstack.review.diff import COMPONENT_TYPE, Diff, ResourceChange, describe
from sandstack.review.impact import impact
from sandstack.review.reasons import UNDECLARED
from sandstack.spec.changes import MEANING

# 2: `security` no longer holds CPU, memory or disk raises (capacity, in `fields` with category 'capacity'); added
# `impact`, `capacity`, `fields` (each spec change with its category), `review` (items --fail-on counts, accepted,
# stale) and `unchanged`. Within a version, fields are only ever added.
FORMAT_VERSION = 2
# GitHub refuses a comment over 65,536 characters: the markdown stays under this, with room for a header.
MARKDOWN_BUDGET = 60_000
TRUNCATED = "… {n} more resource{s}; run `sandstack diff --format text` locally"
VERB = {"create": "created", "update": "updated in place", "replace": "replaced", "delete": "deleted"}


def to_json(diff: Diff, base: str, head: str, review: Review | None = None) -> str:
    data = {
        "format": FORMAT_VERSION, "base": base, "head": head, "counts": diff.counts(), "unchanged": diff.unchanged,
        "impact": impact(diff).to_json(), "capacity": [c.to_json() for c in diff.capacity],
        "fields": [{"path": f.path, "old": f.old, "new": f.new, "effect": f.effect.label,
                    "category": field_category(f.path)} for f in diff.fields],
        "review": {"items": [i.to_json() for i in review.items] if review else [],
                   "stale": [{"change": a.change, "category": a.category, "file": a.file, "line": a.line}
                             for a in review.stale] if review else []},
        "security": [f.to_json() for f in diff.security],
        "snapshots": [{"host": s.host, "template": s.template, "why": s.why, "unbumped": s.unbumped}
                      for s in diff.snapshots],
        "resources": [c.to_json() for c in diff.changes],
    }
    return json.dumps(data, sort_keys=True, indent=2) + "\n"


def _group_key(c: ResourceChange) -> tuple:
    """Sandboxes of one pool with the same action and changes read as one line."""
    if c.resource.kind == "sandbox":
        return (c.resource.host, c.resource.pool, c.action, tuple(sorted(c.changed)),
                tuple(f.path for f in c.reasons))
    return (c.resource.name,)


def _entries(diff: Diff) -> dict[str, list[tuple[str, list[str], int]]]:
    """Per host: (headline, detail lines, resources) of each change, sandboxes of one pool grouped."""
    out: dict[str, list[tuple[str, list[str], int]]] = {}
    changes = [c for c in diff.changes if not c.resource.type.startswith(COMPONENT_TYPE)]
    for _, group in groupby(changes, key=_group_key):
        items = list(group)
        first = items[0]
        r = first.resource
        lost = " (recreated: running processes and writable paths are lost)" if first.action == "replace" else ""
        if r.kind == "sandbox" and len(items) > 1:
            head = f"{len(items)} sandboxes of pool `{r.pool}` on host `{r.host}` {VERB[first.action]}{lost}"
        elif r.kind == "sandbox":
            head = f"sandbox `{r.name}` of pool `{r.pool}` {VERB[first.action]}{lost}"
        else:
            head = f"{r.kind} `{r.name}` {VERB[first.action]}"
        details = [describe(k, o, n) for k, (o, n) in sorted(first.changed.items())]
        details += [f"because {f.text()}" for f in first.reasons] or (
            [f"because it refers to {', '.join(f'`{n}`' for n in first.renewed_with)}, renewed by this change "
             "(Pulumi renews what depends on a resource it replaces)"] if first.renewed_with else [UNDECLARED])
        out.setdefault(r.host or "(stack)", []).append((head, details, len(items)))
    return out


def _legend(diff: Diff) -> list[str]:
    """The change table's words for each effect named in the reasons (`[replace]`, `[scale + guard]`)."""
    words = sorted({w for c in diff.changes for f in c.reasons
                    for part in f.label.split("; ") for w in part.split(": ")[-1].split(" + ")})
    return [f"{w}: {MEANING[w]}" for w in words if w in MEANING]


def to_text(diff: Diff, base: str, head: str, review: Review | None = None) -> str:
    return diff_text.to_text(diff, base, head, review)


def _summary(diff: Diff) -> str:
    counts = diff.counts()
    if not any(counts.values()):
        return "No changes: `pulumi up` would change nothing."
    return "Resources: " + ", ".join(f"{n} {VERB[k].split()[0]}" for k, n in counts.items() if n) + "."


def to_markdown(diff: Diff, base: str, head: str, review: Review | None = None, budget: int = MARKDOWN_BUDGET) -> str:
    """A pull-request comment: the security summary and the snapshots always, then each host's changes in a
    collapsible block while they fit in `budget` characters (GitHub refuses comments over 65,536); what does
    not fit is counted, with the command that shows it all."""
    loosens = [f for f in diff.security if f.loosens]
    lines = [f"### sandstack diff: `{base}` → `{head}`", ""]
    lines.append(f"**Security:** {len(loosens)} loosening(s), {len(diff.security) - len(loosens)} tightening(s)")
    lines.append("")
    for f in diff.security:
        lines.append(f"- {'⚠️ **looser**' if f.loosens else 'tighter'} — pool `{f.pool}`: {f.text}")
    if diff.snapshots:
        lines += ["", "**Snapshots:**", ""]
        for s in diff.snapshots:
            flag = " — ⚠️ changed **without a version bump**" if s.unbumped else ""
            lines.append(f"- template `{s.template}` on host `{s.host}` rebuilds: {', '.join(s.why)}{flag}")
    lines += ["", f"**{_summary(diff)}**"]
    tail = []
    if _legend(diff):
        tail = ["", "<sub>Change effects: " + "; ".join(f"<b>{line.split(': ', 1)[0]}</b>: "
                                                         f"{line.split(': ', 1)[1]}" for line in _legend(diff))
                + "</sub>"]
    # What is left for the hosts' blocks, keeping room for the closing tag and the note on what is left out.
    room = budget - _size(lines) - _size(tail) - _size(["", "</details>", "", TRUNCATED.format(n=10**9, s="s")])
    entries = _entries(diff)
    left_out = 0
    for host, host_entries in entries.items():
        summary = f"{len(host_entries)} change(s)"
        block = ["", f"<details><summary>host <code>{host}</code>: {summary}, {len(host_entries)} shown</summary>", ""]
        shown = 0
        for head_line, details, count in host_entries:
            entry = [f"- {head_line}", *(f"  - {d}" for d in details)]
            if left_out or _size(block + entry) > room:
                left_out += count
                continue
            block += entry
            shown += 1
        if shown:
            block[1] = f"<details><summary>host <code>{host}</code>: {summary}" + (
                f", {shown} shown" if shown < len(host_entries) else "") + "</summary>"
            block += ["", "</details>"]
            room -= _size(block)
            lines += block
    if left_out:
        lines += ["", TRUNCATED.format(n=left_out, s="" if left_out == 1 else "s")]
    return "\n".join(lines + tail) + "\n"


def _size(lines: list[str]) -> int:
    return sum(len(line) + 1 for line in lines)
