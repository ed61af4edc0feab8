"""A Mermaid flowchart of what a diff touches, for the pull-request comment (GitHub renders ```mermaid natively).

The picture is read off the two StackPlans the diff compared (`Diff.plans`) and the diff's own changes, never
re-derived from the spec: each custom node of a plan belongs to one *element* of its host — a pool (its sandboxes,
volumes and seeders), a pool's network, the gateway, the ingress, the runtime, the guard, the connection logger, a
template's snapshot, the egress and ingress networks — by the node's `About`; an element's class is the most
disruptive action of the diff's changes in it (replaced, deleted, created, updated); an arrow joins two elements
when a node of one takes an output of a node of the other (`Ref`: a sandbox joins its network, the gateway and the
ingress join the pools' networks), plus the runtime to the pools of its host (it drives them through the Docker
socket, not through an input). Unchanged elements one arrow away from a changed one are drawn plain, as context.
Hosts whose pictures are identical are folded into one box ("hosts node-a, node-b"); the picture stays within
`MAX_GROUPS` boxes of `MAX_ELEMENTS` elements each, counting what it leaves out in the box's title.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from sandstack.plan.tree import After, Ref
from sandstack.review.reasons import COMPONENT_KINDS
from sandstack.spec.roles import HOST_ROLES, HostRoleInfo, check_complete, parts_of

# Which element of its host a node belongs to, by its `About.kind`: a host role's part's element
# (sandstack.spec.roles), a pool's objects the pool, a template's the snapshot; the qualifier (pool or template)
# follows.
ROLE = {
    "sandbox": "pool", "disk workspace": "pool", "secrets volume": "pool", "secrets seeder": "pool",
    "data volume": "pool", "data loader": "pool", "snapshot": "snapshot", "snapshot push": "snapshot",
    **{kind: part.element for kind, part in parts_of().items()},
}
# Elements qualified by their pool or template ("network of python"), the others one per host.
PER_POOL = {"pool"} | {part.element for part in parts_of().values() if part.per_pool}
# Each element's place left to right, as traffic and control flow (what reaches a pool, the pool, its network, the
# way out), whether it is drawn as context next to a changed one (the guard and the logger touch every pool: only
# when changed), and its words.
ELEMENTS: dict[str, tuple[int, bool, str]] = {
    "provider": (0, False, "Docker provider"),
    "infra image": (0, False, "infra image"),
    "ingress network": (0, False, "ingress network"),
    "ingress": (1, True, "ingress"),
    "runtime": (1, True, "runtime API"),
    "snapshot": (1, True, "snapshot of {q}"),
    "guard": (1, False, "host guard"),
    "pool": (2, True, "pool {q}"),
    "network": (3, True, "network of {q}"),
    "gateway": (4, True, "egress gateway"),
    "logger": (4, False, "connection logger"),
    "egress network": (5, True, "egress network"),
}


def check_roles(roles: dict[str, HostRoleInfo] = HOST_ROLES) -> None:
    """Every host role's element has its place and words (a role without them is refused, not left undrawn)."""
    check_complete("sandstack.review.diagram.ELEMENTS", ELEMENTS, {p.element for p in parts_of(roles).values()},
                   others=frozenset({"pool", "snapshot"}))


check_roles()
RUNTIME = HOST_ROLES["runtime"].part("container").element  # it drives its host's pools through the Docker socket
RANK = {element: rank for element, (rank, _, _) in ELEMENTS.items()}
CONTEXT = {element for element, (_, context, _) in ELEMENTS.items() if context}
WORDS = {element: words for element, (_, _, words) in ELEMENTS.items()}
# The class of each action and how the label says it (a marker as terraform's, for readers without colour).
CLASS = {"replace": "replaced", "delete": "deleted", "create": "created", "update": "updated", "reload": "updated"}
MARK = {"replace": "-/+ replaced", "delete": "- deleted", "create": "+ created", "update": "~ updated",
        "reload": "~ reloaded"}
SEVERITY = ("replace", "delete", "create", "update", "reload")
CLASS_DEFS = {
    "replaced": "fill:#ffe0e0,stroke:#cf222e,stroke-width:2px,color:#000",
    "deleted": "fill:#eeeeee,stroke:#6e7781,stroke-width:2px,stroke-dasharray:5 3,color:#000",
    "created": "fill:#dafbe1,stroke:#1a7f37,stroke-width:2px,color:#000",
    "updated": "fill:#fff8c5,stroke:#9a6700,stroke-width:2px,color:#000",
    "unchanged": "fill:#ffffff,stroke:#afb8c1,color:#57606a",
}
# A host's box: no fill of its own (Mermaid's default is a pale yellow, the colour of "updated"), a grey border that
# reads on GitHub's light and dark pages; its title takes the page's text colour from the theme GitHub picks.
HOST_BOX = "fill:none,stroke:#8c959f,stroke-width:1px"
# Compact: tighter spacing than Mermaid's defaults, so a one-pool change is one short row.
# The title's own margin keeps it above the box's tallest part (Mermaid's default lets a three-line part reach it).
INIT = ('%%{init: {"flowchart": {"nodeSpacing": 18, "rankSpacing": 26, "padding": 6, "diagramPadding": 4, '
        '"subGraphTitleMargin": {"top": 4, "bottom": 10}}}}%%')
MAX_GROUPS = 6  # host boxes drawn; the rest are counted below the picture
MAX_ELEMENTS = 24  # elements per box: past it, alike parts fold into one, then context and the least changed go
FOLD_ABOVE = 3  # alike parts (same role and action) folded into one element past MAX_ELEMENTS
PLURAL = {"pool": "pools", "network": "pool networks", "snapshot": "snapshots"}

Element = tuple[str, str]  # (role, qualifier: pool or template name, "" for a host service)


@dataclass(frozen=True)
class Box:
    """One host's picture (or several identical hosts'): elements with (class, label) and arrows."""

    hosts: tuple[str, ...]
    status: str  # "created", "deleted" or "" (the host exists on both sides)
    elements: tuple[tuple[Element, str, str], ...]  # (element, class, label), in drawing order
    arrows: tuple[tuple[Element, Element], ...]
    left_out: int = 0  # changed elements folded or dropped to stay within MAX_ELEMENTS


def _element(about: Any) -> Element | None:
    if about.kind in COMPONENT_KINDS:
        return None
    role = ROLE[about.kind]  # every other kind has its element: a kind without one is an error, never left out
    return role, (about.pool if role in PER_POOL else about.template if role == "snapshot" else "") or ""


def _refs(value: Any) -> Iterable[Ref]:
    """What a node refers to: its inputs' references, and the nodes an input depends on without a value (`After`: the
    pool networks a reload container joins the gateway to are the gateway's networks all the same)."""
    if isinstance(value, Ref):
        yield value
    elif isinstance(value, After):
        yield from (Ref(node, "") for node in value.nodes)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _refs(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _refs(v)


def _structure(plan: Any) -> tuple[dict[str, set[Element]], dict[str, set[tuple[Element, Element]]]]:
    """Per host of one plan: its elements and the arrows between them (lower RANK first)."""
    elements: dict[str, set[Element]] = {}
    arrows: dict[str, set[tuple[Element, Element]]] = {}
    where: dict[str, tuple[str, Element]] = {}
    for key, node in plan.nodes.items():
        about = plan.about.get(key)
        element = _element(about) if node.custom and about is not None and about.host else None
        if element is not None:
            where[key] = (about.host, element)
            elements.setdefault(about.host, set()).add(element)
    for key, (host, element) in where.items():
        for ref in _refs(dict(plan.nodes[key].inputs)):
            other = where.get(ref.node)
            if other is not None and other[0] == host and other[1] != element:
                pair = sorted((element, other[1]), key=lambda e: (RANK[e[0]], e))
                arrows.setdefault(host, set()).add((pair[0], pair[1]))
    for pool in plan.pools.values():  # the runtime drives every pool of its host through the Docker socket
        if (RUNTIME, "") in elements.get(pool.host, ()):
            arrows.setdefault(pool.host, set()).add(((RUNTIME, ""), ("pool", pool.pool)))
    return elements, arrows


def _grouped(classes: dict[Element, str]) -> dict[Element, list[Element]]:
    """Elements to draw, each with the elements it stands for: unchanged context parts of one role are one element
    ("4 pools: builder, preview, python and 1 more"); past MAX_ELEMENTS, more than FOLD_ABOVE alike changed parts
    too (pools replaced)."""
    alike: dict[tuple[str, str], list[Element]] = {}
    for e in sorted(classes):
        alike.setdefault((e[0], classes[e]), []).append(e)
    out: dict[Element, list[Element]] = {}
    for (role, cls), group in alike.items():
        # Unchanged parts drawn as context (the other pools a renewed guard or runtime reaches) are one part when
        # there are several: the picture stays one short row for a one-pool change.
        if (len(classes) > MAX_ELEMENTS and len(group) > FOLD_ABOVE) or (len(group) > 1 and not cls
                                                                          and role in PLURAL):
            out[(role, f"*{len(group)} {cls}")] = group
        else:
            out.update({e: [e] for e in group})
    return out


def _label(element: Element, members: list[Element], sandboxes: list[dict[str, int]]) -> str:
    role, q = element
    if len(members) > 1:
        names = [m[1] for m in members]
        text = f"{len(members)} {PLURAL[role]}: " + ", ".join(names[:3]) + (
            f" and {len(names) - 3} more" if len(names) > 3 else "")
    else:
        text = WORDS[role].format(q=q)
    total = {a: sum(s.get(a, 0) for s in sandboxes) for a in SEVERITY}
    if role == "pool" and any(total.values()):
        counts = [f"{n} {w}" for a, w in (("replace", "restart"), ("delete", "destroyed"), ("create", "created"),
                                          ("update", "updated in place")) if (n := total[a])]
        text += "<br/>" + ", ".join(counts)
    return text


def boxes(diff: Any) -> list[Box]:
    """The diff's picture as boxes of folded hosts, most disruptive first (empty without plans or changes)."""
    if diff.plans is None:
        return []
    (old_elements, old_arrows), (new_elements, new_arrows) = (_structure(p) for p in diff.plans)
    touched: dict[str, dict[Element, dict[str, int]]] = {}  # host → element → action → resources
    sandboxes: dict[tuple[str, Element], dict[str, int]] = {}
    for change in diff.changes:
        r = change.resource
        if r.kind in COMPONENT_KINDS or not r.host:
            continue
        role = ROLE[r.kind]
        element = (role, (r.pool if role in PER_POOL else r.template if role == "snapshot" else "") or "")
        count = touched.setdefault(r.host, {}).setdefault(element, {})
        count[change.shown] = count.get(change.shown, 0) + 1
        if r.kind == "sandbox":
            per = sandboxes.setdefault((r.host, element), {})
            per[change.action] = per.get(change.action, 0) + 1
    out = []
    for host in sorted(touched):
        before, after = old_elements.get(host, set()), new_elements.get(host, set())
        arrows = old_arrows.get(host, set()) | new_arrows.get(host, set())
        classes: dict[Element, str] = {}
        for element, actions in touched[host].items():
            if element not in before:
                classes[element] = "create"
            elif element not in after:
                classes[element] = "delete"
            else:  # on both sides: resized (some sandboxes created or deleted) reads as updated
                classes[element] = "replace" if "replace" in actions else "reload" if set(actions) == {"reload"} \
                    else "update"
        for a, b in sorted(arrows):  # context: unchanged neighbours of a changed element
            for one, other in ((a, b), (b, a)):
                if one in touched[host] and other not in classes and other[0] in CONTEXT:
                    classes[other] = ""
        members = _grouped(classes)
        folded = {e: key for key, group in members.items() for e in group}
        arrows = {(folded[a], folded[b]) for a, b in arrows if a in folded and b in folded and folded[a] != folded[b]}
        kinds = {key: classes[group[0]] for key, group in members.items()}
        drawn = sorted(kinds, key=lambda e: (SEVERITY.index(kinds[e]) if kinds[e] else 9, RANK[e[0]], e))
        left_out = 0
        if len(drawn) > MAX_ELEMENTS:  # context gives way first, then the least disruptive changes
            drawn = [e for e in drawn if kinds[e]] + [e for e in drawn if not kinds[e]]
            left_out = sum(len(members[e]) for e in drawn[MAX_ELEMENTS:] if kinds[e])
            drawn = drawn[:MAX_ELEMENTS]
        shown = set(drawn)
        elements = tuple((e, CLASS.get(kinds[e], "unchanged"),
                          _label(e, members[e], [sandboxes.get((host, m), {}) for m in members[e]])
                          + (f"<br/>{MARK[kinds[e]]}" if kinds[e] else ""))
                         for e in sorted(drawn, key=lambda e: (RANK[e[0]], e)))
        status = "created" if not before else "deleted" if not after else ""
        out.append(Box((host,), status, elements, tuple(sorted((a, b) for a, b in arrows if {a, b} <= shown)),
                       left_out))
    return _fold(out)


def _fold(items: list[Box]) -> list[Box]:
    """Hosts with the same picture as one box naming them all, in the order of the first."""
    groups: dict[tuple, Box] = {}
    for box in items:
        key = (box.status, box.elements, box.arrows, box.left_out)
        seen = groups.get(key)
        groups[key] = box if seen is None else Box(seen.hosts + box.hosts, *key)
    return list(groups.values())


def _quote(text: str) -> str:
    """A label for `id["..."]`: Mermaid's entity codes for what would end or break the quoted string."""
    return text.replace("&", "#amp;").replace('"', "#quot;").replace("`", "#96;")


def _hosts_title(hosts: tuple[str, ...], limit: int = 4) -> str:
    names = ", ".join(hosts[:limit]) + (f" and {len(hosts) - limit} more" if len(hosts) > limit else "")
    return ("host " if len(hosts) == 1 else f"{len(hosts)} hosts alike: ") + names


# How tall Mermaid draws a box, calibrated on the golden cases in headless Chromium at a comment's width
# (tests/review/test_render.py checks the estimate against the drawing): its title and padding, and each part of
# the busiest column (a part is two or three label lines).
BOX_PX, PART_PX = 75, 85
MAX_HEIGHT = 700  # px: past it the picture gives way to a table of the same parts (a reviewer would scroll past it)


def height(items: list[Box]) -> int:
    """About how tall the picture of these boxes is drawn (px): boxes stack, parts of one column stack."""
    total = 0
    for box in items[:MAX_GROUPS]:
        columns: dict[int, int] = {}
        for element, _, _ in box.elements:
            columns[RANK[element[0]]] = columns.get(RANK[element[0]], 0) + 1
        total += BOX_PX + PART_PX * max(columns.values(), default=1)
    return total


def table_rows(items: list[Box]) -> list[tuple[str, str]]:
    """The picture as rows (host group, its changed parts in words), for a picture too tall to draw."""
    out = []
    for box in items:
        hosts = _hosts_title(box.hosts) + (f" ({box.status})" if box.status else "")
        parts = [label.replace("<br/>", " ") for _, cls, label in box.elements if cls != "unchanged"]
        out.append((hosts + (f", {box.left_out} more changed parts" if box.left_out else ""), "; ".join(parts)))
    return out


def to_mermaid(diff: Any) -> tuple[str, int]:
    """The flowchart's text (without the fence) and how many host boxes it leaves out ("" when nothing to draw)."""
    items = boxes(diff)
    if not items:
        return "", 0
    lines = [INIT, "flowchart LR"]
    used = set()
    for g, box in enumerate(items[:MAX_GROUPS]):
        title = _hosts_title(box.hosts) + (f" ({box.status})" if box.status else "") + (
            f", {box.left_out} more changed parts not drawn" if box.left_out else "")
        lines.append(f'  subgraph g{g}["{_quote(title)}"]')
        # Left to right inside the box too (Mermaid lays a subgraph top to bottom otherwise): one row of parts.
        lines.append("    direction LR")
        ids = {}
        for i, (element, cls, label) in enumerate(box.elements):
            ids[element] = f"g{g}n{i}"
            used.add(cls)
            lines.append(f'    {ids[element]}["{_quote(label)}"]:::{cls}')
        lines.append("  end")
        lines += [f"  {ids[a]} --> {ids[b]}" for a, b in box.arrows]
    lines += [f"  classDef {name} {CLASS_DEFS[name]}" for name in CLASS_DEFS if name in used]
    lines += [f"  style g{g} {HOST_BOX}" for g in range(min(len(items), MAX_GROUPS))]
    return "\n".join(lines), max(0, len(items) - MAX_GROUPS)
