"""`sandstack diff --format markdown`: the pull-request comment, in the order a reviewer reads it.

1. the impact headline (sandstack.review.impact: what restarts, what is created or destroyed, which host services
   are renewed, what data is lost, how much got less safe);
2. a table, one row per pool (its hosts folded into one cell: "node-a, node-b"): pool | hosts | action |
   sandboxes restarting | cause, then the host services renewed and the data lost;
3. the security section (findings alike on several pools folded into one line; accepted ones with their reason),
   capacity changes, accepted changes and stale acceptances (sandstack.review.categories), the snapshot rebuilds;
4. a Mermaid picture of the hosts' parts the change touches (sandstack.review.diagram);
5. the details, per host (identical hosts folded), collapsed in <details>, each resource's changed settings in a
   ```diff fence so GitHub colours them (`-` old, `+` new).

GitHub refuses a comment over 65,536 characters: the comment stays within `budget` (MARKDOWN_BUDGET). Parts 1-3
are always kept whole; the picture comes when it takes at most half of the room left, the details fill the rest
host by host, and what is left out (resources, the picture, the legend) is counted, with the command that shows
everything. Only if parts 1-3 alone do not fit (thousands of pools) do their longest lists get cut, each saying how
many rows it left out.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from sandstack.review import diagram, show
from sandstack.review.capacity import HOST_DIMS, ORDER, WORDS, show as amount
from sandstack.review.categories import Review, Verdict
from sandstack.review.diff import COMPONENT_TYPE, Diff, ResourceChange
from sandstack.review.diff_text import SHOWN, _because as because, accepted_lines, alike, plan_line, remaining_lines
from sandstack.review.impact import VERB, Impact, impact as impact_of
from sandstack.review.reasons import UNDECLARED
from sandstack.spec.changes import MEANING

# GitHub refuses a comment over 65,536 characters: the markdown stays under this, with room for a header.
MARKDOWN_BUDGET = 60_000
LOCALLY = "run `sandstack diff` locally for everything"
MARK = {"create": "+", "update": "!", "replace": "-/+", "reload": "!", "delete": "-"}  # `!`: GitHub's diff colour for "changed"
ACTION = {"create": "+ create", "update": "~ update", "replace": "-/+ replace", "reload": "~ reload",
          "delete": "- delete", "none": "none"}
TABLE_HEAD = ["| pool | hosts | action | sandboxes restarting | cause |", "|---|---|---|--:|---|"]
CAPACITY_FIRST = "reserved"  # the capacity table's first column: pool, host or the stack
MAX_CAUSES = 3  # spec paths named in a table row; more are counted
MAX_HOSTS = 6  # host names in a table row or a heading; more are counted
MAX_SETTING_LINES = 12  # `-`/`+` lines per changed setting; more are counted
MAX_CAPACITY_ROWS = 8  # pool and host rows of the capacity table (alike ones folded first); more are counted


def _code(text: str) -> str:
    """`text` as an inline code span, whatever backticks it holds."""
    text = text.replace("\n", " ")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _text(text: str) -> str:
    """Free text in markdown (a finding, a reason): no HTML tags, no table-cell breaks."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def _names(names: Iterable[str], limit: int = MAX_HOSTS) -> str:
    names = list(names)
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _size(lines: list[str]) -> int:
    return sum(len(line) + 1 for line in lines)


# --- the part always kept --------------------------------------------------------------------------------

def _pool_table(facts: Impact) -> list[str]:
    rows = []
    for p in facts.pools:
        causes = [_code(c) for c in p.causes[:MAX_CAUSES]]
        if len(p.causes) > MAX_CAUSES:
            causes.append(f"and {len(p.causes) - MAX_CAUSES} more")
        others = [f"{n} {w}" for n, w in ((p.create, "created"), (p.destroy, "destroyed"),
                                          (p.update, "updated in place")) if n]
        action = ACTION[p.action] + (f" ({', '.join(others)})" if others else "")
        rows.append(f"| {_code(p.pool)} | {_text(_names(p.hosts))} | {action} | {p.restart} | "
                    f"{', '.join(causes) or _text(UNDECLARED)} |")
    return rows


def _services(facts: Impact) -> list[str]:
    out = []
    for s in facts.services:
        out.append(f"- {s.kind} {VERB[s.action]} on {_text(_names(s.hosts))}: {_text(s.interrupts)}")
    for d in facts.data:
        count = f" ({d.count})" if d.count > len(d.hosts) else ""
        out.append(f"- ⚠️ data lost: {d.kind} {VERB[d.action]} on {_text(_names(d.hosts))}{count}: {_text(d.lost)}")
    return out


def _security(diff: Diff, review: Review | None) -> list[str]:
    """One line per finding, pools with the same finding folded into one line; looser first; an accepted one says
    by what reason."""
    accepted = {i.text: i.accepted for i in (review.items if review else []) if i.category == "security"}
    folded: dict[tuple[bool, str, str], list[str]] = {}
    for f in diff.security:
        by = accepted.get(f"pool {f.pool}: {f.text}")
        folded.setdefault((f.loosens, f.text, f"{by.reason} ({by.where})" if by else ""), []).append(f.pool)
    out = []
    for (loosens, text, by), pools in sorted(folded.items(), key=lambda item: not item[0][0]):
        which = ("pool " if len(pools) == 1 else "pools ") + ", ".join(_code(p) for p in pools)
        mark = ("✅ accepted" if by else "⚠️ **looser**") if loosens else "tighter"
        out.append(f"- {mark} — {which}: {_text(text)}" + (f" — {_text(by)}" if by else ""))
    return out


def verdict_block(verdict: Verdict | None) -> list[str]:
    """Why CI is red, first: the categories that failed, their items (a few named per category, the rest
    counted) and the exit status; a green run says what passed."""
    if verdict is None or not (verdict.fail_on or verdict.stale):
        return []
    if verdict.status == 0:
        return [f"**✅ {_text(verdict.headline())}**", ""]
    out = [f"**❌ CI {_text(verdict.headline())}**", ""]
    for kind in verdict.failed:
        items = [i for i in verdict.items if i.category == kind]
        out += [f"- {kind}: {_text(i.text)}" + (f" (bound {_text(i.where)})" if i.where else "")
                for i in items[:SHOWN]]
        if len(items) > SHOWN:
            out.append(f"- {kind}: … and {len(items) - SHOWN} more not accepted")
    return out + [""] if len(out) > 2 else out


def capacity_table(diff: Diff) -> list[str]:
    """The reservations as a compact table: a row per changed pool and host and the stack, a column per dimension
    (GPUs only where there are some); `2 → 4`, `(max …)` for the on-demand ceiling, `of N` a host's allowance.
    Pools (or hosts) whose cells read the same are one row ("each"); past MAX_CAPACITY_ROWS rows the rest are
    counted."""
    reserved = diff.reserved
    if reserved is None or not reserved.changed:
        return []
    dims = [d for d in ORDER if d != "gpus" or any(r.shows("gpus") for r in reserved.rows())]
    out = [f"| {CAPACITY_FIRST} | " + " | ".join(WORDS[d] for d in dims) + " |", "|---|" + "--:|" * len(dims)]
    folded: dict[tuple, list[str]] = {}
    for row in (*reserved.pools, *reserved.hosts):
        folded.setdefault((row.kind, tuple(row.cell(d) for d in dims)), []).append(row.name)
    rows = []
    for (kind, cells), names in folded.items():
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        name = f"{kind} {_code(names[0])}" if len(names) == 1 else \
            f"{len(names)} {kind}s {', '.join(_code(n) for n in names[:3])}{more} (each)"
        rows.append(f"| {name} | " + " | ".join(_text(c) for c in cells) + " |")
    if len(rows) > MAX_CAPACITY_ROWS:
        rows = rows[:MAX_CAPACITY_ROWS] + [f"| … {len(rows) - MAX_CAPACITY_ROWS} more rows: {LOCALLY} |"
                                           + " |" * len(dims)]
    stack = reserved.stack
    out += rows + ["| **stack** | " + " | ".join(_text(stack.cell(d)) for d in dims) + " |"]
    room: dict[str, list[str]] = {}
    for row in reserved.hosts:
        headroom = row.headroom()
        if headroom is not None and row.allowed is not None:
            words = ", ".join(f"{amount(d, headroom.get(d))} {WORDS[d]}" for d in HOST_DIMS if row.allowed.get(d))
            room.setdefault(words, []).append(row.name)
    if room:
        out += ["", "Headroom at the on-demand ceiling (capacity × overcommit): " + "; ".join(
            f"host{'s' if len(hosts) > 1 else ''} {_text(_names(hosts, 3))}{' each' if len(hosts) > 1 else ''}: "
            f"{words}" for words, hosts in room.items()) + "."]
    return out


def _reviewed(diff: Diff, review: Review | None) -> list[str]:
    """Capacity changes (pools alike folded, then the reservations' table), the cost, the changes the review file
    accepted (and the categories their changes still fail) and the acceptances that match nothing
    (sandstack.review.categories)."""
    out = []
    folded: dict[str, list[str]] = {}
    for c in diff.capacity:
        folded.setdefault(c.text, []).append(c.pool)
    table = capacity_table(diff)
    if folded or table:
        out += ["", "#### Capacity", ""]
        out += [f"- {'pool' if len(pools) == 1 else 'pools'} {', '.join(_code(p) for p in pools)}: {_text(text)}"
                for text, pools in folded.items()]
        out += ([""] if folded and table else []) + table
    if diff.cost is not None:
        out += ["", "#### Cost", "", *(f"- {_text(line)}" for line in diff.cost.lines())]
    accepted = [line.strip() for line in accepted_lines(review)] if review is not None else []
    if accepted:
        out += ["", "#### Accepted", "", *(f"- ✅ {_text(line)}" for line in accepted)]
        out += [f"- ⚠️ {_text(line.strip())}" for line in remaining_lines(review)] if review is not None else []
    if review is not None and review.stale:
        out += ["", "#### ⚠️ Stale acceptances (they match no change: remove them)", ""]
        out += [f"- {_text(a.where)}: {a.category} {_code(a.change)}" for a in review.stale]
    return out


def _snapshots(diff: Diff) -> list[str]:
    folded: dict[tuple[str, tuple[str, ...], bool], list[str]] = {}
    for s in diff.snapshots:
        folded.setdefault((s.template, tuple(s.why), s.unbumped), []).append(s.host)
    return [f"- template {_code(t)} rebuilds on {_text(_names(hosts))}: {_text(', '.join(why))}"
            + (" — ⚠️ changed **without a version bump**" if unbumped else "")
            for (t, why, unbumped), hosts in folded.items()]


def _kept(diff: Diff, review: Review | None, facts: Impact, base: str, head: str, room: int,
          verdict: Verdict | None = None) -> list[str]:
    """The verdict, the headline, the pools' table, the services and data lost, security, capacity and snapshots:
    always in the comment. Only when they alone exceed `room` are the table and the security list cut, each saying
    what it left out."""
    title = [f"### sandstack diff: {_code(base)} → {_code(head)}", "", *verdict_block(verdict),
             f"**{_text(facts.headline())}**", ""]
    table = _pool_table(facts)
    security = _security(diff, review)
    looser = sum(1 for f in diff.security if f.loosens)
    rest_head = ["", *(["**Host services and data:**", "", *_services(facts), ""] if _services(facts) else [])]
    sec_head = [f"#### {'⚠️ ' if looser else ''}Security: {looser} looser, {len(diff.security) - looser} tighter",
                ""]
    snaps = [*_reviewed(diff, review), *(["", "#### Snapshots", "", *_snapshots(diff)] if diff.snapshots else [])]
    closing = ["", f"**{plan_line(diff)}**" if any(diff.counts().values()) else
               f"**No changes: `pulumi up` would change nothing ({diff.unchanged} unchanged).**"]

    def assemble(rows: list[str], findings: list[str]) -> list[str]:
        pools = [*TABLE_HEAD, *rows] if facts.pools else ["No pool's sandboxes change."]
        return [*title, *pools, *rest_head, *sec_head, *(findings or ["No security-relevant change."]),
                *snaps, *closing]

    out = assemble(table, security)
    while _size(out) > room and (len(table) > 1 or len(security) > 1):
        # Halve the longer list, keeping its first rows (pools in name order; looser findings first).
        if len(table) >= len(security):
            table = table[:len(table) // 2]
        else:
            security = security[:len(security) // 2]
        cut_rows, cut_findings = len(facts.pools) - len(table), len(_security(diff, review)) - len(security)
        rows = table + ([f"| … | | | {sum(p.restart for p in facts.pools[len(table):])} | {cut_rows} more pools "
                         f"not shown: {LOCALLY} |"] if cut_rows else [])
        findings = security + ([f"- … {cut_findings} more findings not shown: {LOCALLY}"] if cut_findings else [])
        out = assemble(rows, findings)
    return out


# --- the details: each resource's changed settings, per host -----------------------------------------------

def _value(key: str, value: Any) -> str:
    """One value on a `-`/`+` line, in the spec's units (sandstack.review.show), whole, on one line (a fence
    scrolls sideways; the comment's budget, not a width, bounds what is shown)."""
    return show.value(key, value).replace("\n", "⏎")


def _setting_lines(key: str, old: Any, new: Any) -> list[str]:
    """A changed setting as `-` (old) and `+` (new) lines: entries of a map or list, lines of a text, else the
    two values."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in dict.fromkeys([*old, *new]):
            if old.get(k) != new.get(k):
                out += _setting_lines(f"{key}.{k}", old.get(k), new.get(k))
    elif isinstance(old, str) and isinstance(new, str) and "\n" in old + new:
        a, b = old.splitlines(), new.splitlines()
        out = [f"-     {key}: {_value(key, v)}" for v in a if v not in b] + [f"+     {key}: {_value(key, v)}" for v in b
                                                                          if v not in a]
    elif isinstance(old, list) and isinstance(new, list) and old and new and all(
            isinstance(v, str) for v in old + new) and set(old) != set(new):
        out = [f"-     {key}: {_value(key, v)}" for v in old if v not in new] + [f"+     {key}: {_value(key, v)}" for v in new
                                                                            if v not in old]
    else:
        out = ([f"-     {key}: {_value(key, old)}"] if old is not None else []) + (
            [f"+     {key}: {_value(key, new)}"] if new is not None else [])
    if len(out) > MAX_SETTING_LINES:
        out = out[:MAX_SETTING_LINES] + [f"      … {len(out) - MAX_SETTING_LINES} more lines of {key}"]
    return out


def _what(c: ResourceChange, count: int) -> str:
    r = c.resource
    if r.kind == "sandbox":
        return f"{count} sandbox{'es' if count > 1 else ''} of pool {r.pool}" if count > 1 or not r.pool else \
            f"sandbox {r.name} of pool {r.pool}"
    return f"{r.kind} {r.name}"


def _entry(c: ResourceChange, count: int) -> list[str]:
    lost = " (processes and writable paths lost)" if c.resource.kind == "sandbox" and c.action == "replace" else ""
    lines = [f"{MARK[c.shown]} {_what(c, count)}: {VERB[c.shown]}{lost}"]
    for key in sorted(c.changed):
        lines += _setting_lines(key, *c.changed[key])
    if c.reasons or c.action in ("update", "replace"):
        lines += [f"      # {line}" for line in because(c)]
    return lines


def host_entries(diff: Diff) -> list[tuple[tuple[str, ...], list[tuple[list[str], int]]]]:
    """Per host, in the diff's order, its entries (lines, resources): sandboxes of one pool whose lines read the
    same are one entry; hosts with identical entries are folded."""
    per_host: dict[str, dict[tuple, list[ResourceChange]]] = {}
    for c in diff.changes:
        if c.resource.type.startswith(COMPONENT_TYPE):
            continue
        key = ("sandbox", c.resource.pool, c.action, tuple(_entry(c, 1)[1:])) if c.resource.kind == "sandbox" \
            else ("one", c.resource.name)
        per_host.setdefault(c.resource.host or "(stack)", {}).setdefault(key, []).append(c)
    folded: dict[tuple, tuple[list[str], tuple]] = {}
    for host, groups in per_host.items():
        entries = tuple((tuple(_entry(items[0], len(items))), len(items)) for items in groups.values())
        # Alike but for the host's own name in its resources' names, as the text folds them (diff_text.alike).
        key = tuple((alike(host, list(lines)), n) for lines, n in entries)
        folded.setdefault(key, ([], entries))[0].append(host)
    return [(tuple(hosts), [(list(lines), n) for lines, n in entries]) for hosts, entries in folded.values()]


def _details(diff: Diff, room: int) -> tuple[list[str], int]:
    """The hosts' collapsed blocks that fit in `room` characters, and how many resources were left out."""
    out: list[str] = []
    left_out, used, closing = 0, 0, _size(["```", "", "</details>"])
    for hosts, entries in host_entries(diff):
        total = sum(n for _, n in entries)
        where = ("host " if len(hosts) == 1 else f"{len(hosts)} identical hosts ") + ", ".join(
            f"<code>{_text(h)}</code>" for h in hosts[:MAX_HOSTS]) + (
            f" and {len(hosts) - MAX_HOSTS} more" if len(hosts) > MAX_HOSTS else "")
        each = f" each (names of <code>{_text(hosts[0])}</code>)" if len(hosts) > 1 else ""
        block = ["", "<details>", f"<summary>{where}: {total} resource{'s' if total != 1 else ''} change{each}"
                 "</summary>", "", "```diff"]
        size, shown = _size(block), 0
        for lines, count in entries:
            if left_out or used + size + _size(lines) + closing > room:
                left_out += count * len(hosts)
                continue
            block += lines
            size += _size(lines)
            shown += count
        if shown:
            if shown < total:
                block[2] = block[2].replace("</summary>", f" ({shown} shown)</summary>")
            out += block + ["```", "", "</details>"]
            used += size + closing
    return out, left_out


def _legend(diff: Diff) -> list[str]:
    words = sorted({w for c in diff.changes for f in c.reasons
                    for part in f.label.split("; ") for w in part.split(": ")[-1].split(" + ")})
    shown = [f"<b>{w}</b>: {_text(MEANING[w])}" for w in words if w in MEANING]
    return ["", "<sub>Change effects: " + "; ".join(shown) + "</sub>"] if shown else []


PICTURE_HEAD = ["| hosts | parts changed |", "|---|---|"]
MAX_PICTURE_ROWS = 20  # host groups of the picture's table; more are counted


def _picture(diff: Diff) -> list[str]:
    """The Mermaid picture; one that would be drawn taller than diagram.MAX_HEIGHT gives way to a table of the same
    parts per host group, saying so and counting what it leaves out."""
    items = diagram.boxes(diff)
    if not items:
        return []
    tall = diagram.height(items)
    if tall > diagram.MAX_HEIGHT:
        rows = diagram.table_rows(items)
        shown = [f"| {_text(hosts)} | {_text(parts) or 'context only'} |" for hosts, parts in rows[:MAX_PICTURE_ROWS]]
        more = len(rows) - len(shown)
        return ["", f"_The picture would be about {tall:,} px tall ({len(items)} host group"
                    f"{'s' if len(items) != 1 else ''}): its parts as a table._", "", *PICTURE_HEAD, *shown] + (
            [f"| … | {more} more host groups not shown: {LOCALLY} |"] if more else [])
    text, hidden_hosts = diagram.to_mermaid(diff)
    return ["", "```mermaid", text, "```"] + (
        [f"_The picture leaves out {hidden_hosts} more host group{'s' if hidden_hosts != 1 else ''}._"]
        if hidden_hosts else [])


def to_markdown(diff: Diff, base: str, head: str, review: Review | None = None, verdict: Verdict | None = None,
                budget: int = MARKDOWN_BUDGET) -> str:
    """The pull-request comment, at most `budget` characters (see the module's docstring for what gives way)."""
    facts = impact_of(diff)
    note_room = _size(["", f"_… {10**9} more resource changes, the picture and the legend not shown: {LOCALLY}._"])
    lines = _kept(diff, review, facts, base, head, budget - note_room, verdict)
    room = budget - _size(lines) - note_room
    picture = _picture(diff)
    fits = _size(picture) <= room // 2  # the picture may take half of what is left; the details the rest
    if fits:
        lines += picture
        room -= _size(picture)
    details, left_out = _details(diff, room)
    lines += details
    room -= _size(details)
    legend = _legend(diff)  # explains the effects the details name: after them, when it fits
    missing = [f"{left_out} more resource change{'s' if left_out != 1 else ''}"] if left_out else []
    if picture and not fits:
        missing.append("the picture")
    if legend and _size(legend) > room:
        missing.append("the legend")
        legend = []
    if missing:
        lines += ["", f"_… {', '.join(missing[:-1])}{' and ' if len(missing) > 1 else ''}{missing[-1]} not shown: "
                      f"{LOCALLY}._"]
    return "\n".join(lines + legend) + "\n"
