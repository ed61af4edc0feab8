"""The diff in words: the security summary first, then snapshot rebuilds, then what happens on each host."""

from __future__ import annotations

import json
from itertools import groupby

from sandstack.review import diff_text
from sandstack.review.categories import Review, Verdict, field_category
from sandstack.review.diff import COMPONENT_TYPE, Diff, ResourceChange, describe
from sandstack.review.impact import impact
from sandstack.review.reasons import UNDECLARED
from sandstack.spec.changes import MEANING

# 2: `security` no longer holds CPU, memory or disk raises (capacity, in `fields` with category 'capacity'); added
# `impact`, `capacity`, `fields` (each spec change with its category), `review` (items --fail-on counts, accepted,
# stale) and `unchanged`. Within a version, fields are only ever added: since, `reserved` (per pool, host and the
# stack, warm and ceiling before → after, hosts' allowance and headroom), `cost` (null without a price list),
# `verdict` (the --fail-on categories failed and passed, their items, the exit status), `review.remaining`,
# `impact.capacity` and `impact.cost` (the headline's sentences), each review item's `rule`, and each field's
# `inherited` (an unset side's resolved value and where it is written).
FORMAT_VERSION = 2
VERB = {"create": "created", "update": "updated in place", "replace": "replaced", "delete": "deleted"}


def to_json(diff: Diff, base: str, head: str, review: Review | None = None, verdict: Verdict | None = None) -> str:
    data = {
        "format": FORMAT_VERSION, "base": base, "head": head, "counts": diff.counts(), "unchanged": diff.unchanged,
        "verdict": (verdict or Verdict((), (), (), (), 0)).to_json(),
        "reserved": diff.reserved.to_json() if diff.reserved is not None else None,
        "cost": diff.cost.to_json() if diff.cost is not None else None,
        "impact": impact(diff).to_json(), "capacity": [c.to_json() for c in diff.capacity],
        "fields": [{"path": f.path, "old": f.old, "new": f.new, "effect": f.effect.label,
                    "category": field_category(f.path),
                    "inherited": {side: None if found is None else {"value": found[0], "from": found[1]}
                                  for side, found in zip(("old", "new"), f.inherited)}} for f in diff.fields],
        "review": {"items": [i.to_json() for i in review.items] if review else [],
                   "stale": [{"change": a.change, "category": a.category, "categories": list(a.categories),
                              "file": a.file, "line": a.line} for a in review.stale] if review else [],
                   "remaining": [{"change": change, "where": list(where), "accepted": list(done),
                                  "remaining": list(left)} for change, where, done, left in review.remaining()]
                   if review else []},
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
            head = f"{r.kind} `{r.name}` {VERB[first.shown]}"
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


def to_text(diff: Diff, base: str, head: str, review: Review | None = None, verdict: Verdict | None = None) -> str:
    return diff_text.to_text(diff, base, head, review, verdict)


def _summary(diff: Diff) -> str:
    counts = diff.counts()
    if not any(counts.values()):
        return "No changes: `pulumi up` would change nothing."
    return "Resources: " + ", ".join(f"{n} {VERB[k].split()[0]}" for k, n in counts.items() if n) + "."
