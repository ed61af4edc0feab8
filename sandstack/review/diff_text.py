"""`sandstack diff --format text`: the plan in the conventions reviewers know (terraform plan, `pulumi preview
--diff`). The impact headline first (sandstack.review.impact), then what got less safe, capacity changes, accepted
and stale acceptances, snapshot rebuilds, then each host's resources with a marker (`+` create, `~` update in place,
`-/+` replace, `-` delete), their settings `old → new` in the spec's units (sandstack.review.show), the spec change
that caused each (`# forces replacement` on the one that forced it), identical hosts folded into one section, and a
closing `Plan: …` line with the unchanged count."""

from __future__ import annotations

from itertools import groupby

from sandstack.review.categories import Review, Verdict
from sandstack.review.diff import COMPONENT_TYPE, Diff, ResourceChange, describe
from sandstack.review.impact import SANDBOX_LOSES, impact
from sandstack.review.reasons import UNDECLARED, Reason
from sandstack.spec.changes import MEANING

MARK = {"create": "+", "update": "~", "replace": "-/+", "reload": "~", "delete": "-"}
FORCES = "  # forces replacement"


def _forces(reason: Reason, kind: str) -> bool:
    """Whether the effect that reached the resource replaces it (for a sandbox: replaces, rebuilds or switches its
    image, or makes its workspaces anew; any other resource an effect reaches is renewed by it)."""
    if kind != "sandbox":
        return True
    return any(e.sandboxes == "replace" or e.snapshot != "none" or e.workspaces for _, e in reason.held)


def _because(c: ResourceChange) -> list[str]:
    if not c.reasons:
        if c.renewed_with:
            return [f"because it refers to {', '.join(c.renewed_with)}, renewed by this change (Pulumi renews what "
                    "depends on a resource it replaces)" + (FORCES if c.shown == "replace" else "")]
        return [UNDECLARED]
    out, marked = [], c.shown != "replace"
    for reason in c.reasons:
        mark = not marked and _forces(reason, c.resource.kind)
        marked = marked or mark
        out.append(f"because {reason.text()}" + (FORCES if mark else ""))
    return out


def _group_key(c: ResourceChange) -> tuple:
    """Sandboxes of one pool with the same action and changes read as one entry."""
    if c.resource.kind == "sandbox":
        return (c.resource.host, c.resource.pool, c.action, tuple(sorted(c.changed)),
                tuple(f.path for f in c.reasons))
    return (c.resource.name,)


def _host_blocks(diff: Diff) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    changes = [c for c in diff.changes if not c.resource.type.startswith(COMPONENT_TYPE)]
    for _, group in groupby(changes, key=_group_key):
        items = list(group)
        first, r = items[0], items[0].resource
        lost = f" ({SANDBOX_LOSES})" if r.kind == "sandbox" and first.action in ("replace", "delete") else ""
        if r.kind == "sandbox" and len(items) > 1:
            names = [c.resource.name for c in items]
            shown = ", ".join(names) if len(names) <= 4 else f"{names[0]}, {names[1]}, … {names[-1]}"
            head = f"{len(items)} sandboxes of pool {r.pool}: {shown}{lost}"
        elif r.kind == "sandbox":
            head = f"sandbox {r.name} of pool {r.pool}{lost}"
        elif first.reload:  # the role takes its new configuration in place
            head = f"reload {r.kind.removesuffix(' reload')} {r.name}"
        else:
            head = f"{r.kind} {r.name}"
        lines = [f"{MARK[first.shown]:>3} {head}"]
        lines += [f"      {describe(k, o, n)}" for k, (o, n) in sorted(first.changed.items())]
        lines += [f"      {line}" for line in _because(first)]
        out.setdefault(r.host or "(stack)", []).extend(lines)
    return out


def alike(host: str, lines: list[str]) -> tuple[str, ...]:
    """What a host's lines say but for the host's own name (in its resources' names): hosts with the same fold into
    one section, in every format (text, the markdown's details; the picture's boxes name no host)."""
    return tuple(line.replace(host, "\0") for line in lines)


def _folded(blocks: dict[str, list[str]]) -> list[tuple[list[str], list[str]]]:
    """Hosts whose changes read the same but for the host's own name, as one section: (hosts, lines of the first)."""
    out: list[tuple[list[str], list[str]]] = []
    seen: dict[tuple, int] = {}
    for host, lines in blocks.items():
        key = alike(host, lines)
        if key in seen and host != "(stack)":
            out[seen[key]][0].append(host)
        else:
            seen[key] = len(out)
            out.append(([host], lines))
    return out


def _legend(diff: Diff) -> list[str]:
    """The change table's words for each effect named in the reasons (`[replace]`, `[scale + guard]`)."""
    words = sorted({w for c in diff.changes for f in c.reasons
                    for part in f.label.split("; ") for w in part.split(": ")[-1].split(" + ")})
    return [f"{w}: {MEANING[w]}" for w in words if w in MEANING]


def plan_line(diff: Diff) -> str:
    counts = diff.counts()
    reload = f"{counts['reload']} to reload in place, " if counts["reload"] else ""
    return (f"Plan: {counts['create']} to create, {counts['update']} to update in place, {counts['replace']} to "
            f"replace, {reload}{counts['delete']} to delete, {diff.unchanged} unchanged.")


def security_lines(diff: Diff, review: Review | None) -> list[str]:
    accepted = {i.text: i.accepted for i in (review.items if review else []) if i.category == "security"}
    if not diff.security:
        return ["no security-relevant change"]
    out = []
    for f in diff.security:
        line = f"{'LOOSER' if f.loosens else 'tighter'}  pool {f.pool}: {f.text}"
        by = accepted.get(f"pool {f.pool}: {f.text}")
        out.append(line + (f"  (accepted: {by.reason})" if by else ""))
    return out


def accepted_lines(review: Review) -> list[str]:
    """One line per acceptance and category: what it accepted (counted past the first), its reason and where it
    is written; a 1,000-sandbox restart accepted is one line, not a thousand."""
    out = []
    groups: dict[tuple, list[str]] = {}
    for item in review.accepted():
        groups.setdefault((item.category, item.accepted), []).append(item.text)
    for (kind, by), texts in groups.items():
        more = f" and {len(texts) - 1} more" if len(texts) > 1 else ""
        out.append(f"  {kind}: {texts[0]}{more} — {by.reason} ({by.where})")
    return out


SHOWN = 5  # failing items named per category in the verdict; the rest are counted


def verdict_lines(verdict: Verdict) -> list[str]:
    """The verdict and, per failing category, its items not accepted (a few named, the rest counted)."""
    out = [verdict.headline()]
    for kind in verdict.failed:
        items = [i for i in verdict.items if i.category == kind]
        out += [f"  {kind}: {i.text}" + (f" (bound {i.where})" if i.where else "") for i in items[:SHOWN]]
        if len(items) > SHOWN:
            out.append(f"  {kind}: … and {len(items) - SHOWN} more not accepted")
    return out


def remaining_lines(review: Review) -> list[str]:
    """An acceptance that accepted some of its change's categories: which remain, not accepted."""
    return [f"  {change} ({', '.join(where)}): accepted for {', '.join(done)}; still not accepted: {', '.join(left)}"
            for change, where, done, left in review.remaining()]


def capacity_lines(diff: Diff) -> list[str]:
    """Per pool in words (what each sandbox gets), then the reservations per pool, host and the stack."""
    lines = [f"pool {c.pool}: {c.text}" for c in diff.capacity]
    if diff.reserved is not None and diff.reserved.changed:
        lines += ["reserved (warm, on-demand ceiling as max; a host's allowance is capacity × overcommit):"]
        lines += [f"  {line}" for line in diff.reserved.lines()]
    return lines


def to_text(diff: Diff, base: str, head: str, review: Review | None = None, verdict: Verdict | None = None) -> str:
    summary = impact(diff)
    lines = [f"sandstack diff {base} → {head}", ""]
    if verdict is not None and (verdict.fail_on or verdict.stale):
        lines += [f"CI {line}" if i == 0 else line for i, line in enumerate(verdict_lines(verdict))] + [""]
    lines += [summary.headline()]
    lines += [f"  {line}" for line in summary.lines()]
    lines += ["", "Security:"] + [f"  {line}" for line in security_lines(diff, review)]
    if capacity_lines(diff):
        lines += ["", "Capacity:"] + [f"  {line}" for line in capacity_lines(diff)]
    if diff.cost is not None:
        lines += ["", "Cost:"] + [f"  {line}" for line in diff.cost.lines()]
    if review is not None and review.accepted():
        lines += ["", "Accepted:"] + accepted_lines(review) + remaining_lines(review)
    if review is not None and review.stale:
        lines += ["", "Stale acceptances (they match no change; remove them):"]
        lines += [f"  {a.where}: {a.category} {a.change}" for a in review.stale]
    if diff.snapshots:
        lines += ["", "Snapshots:"]
        for s in diff.snapshots:
            flag = "  (changed WITHOUT a version bump)" if s.unbumped else ""
            lines.append(f"  template {s.template} on host {s.host} rebuilds: {', '.join(s.why)}{flag}")
    for hosts, block in _folded(_host_blocks(diff)):
        named = ", ".join(hosts)
        lines += ["", f"host {named}:" if len(hosts) == 1 else f"hosts {named} (the same on each; names of {hosts[0]}):"]
        lines += [f"  {line}" for line in block]
    if _legend(diff):
        lines += ["", "Change effects (the change table):"] + [f"  {line}" for line in _legend(diff)]
    lines += ["", plan_line(diff) if any(diff.counts().values()) else
              f"No changes: `pulumi up` would change nothing ({diff.unchanged} unchanged)."]
    return "\n".join(lines) + "\n"
