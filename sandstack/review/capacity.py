"""The capacity part of a change: per pool, per host and for the stack, the CPUs, memory, disk, GPUs and sandboxes
reserved before → after (sandstack.spec.reserve), warm (`replicas`) and at the on-demand ceiling (`max`) apart (a pool
with size classes counts every sandbox at the ceiling at its largest class), its classes' changes, and each host's
headroom: what its `capacity` × `overcommit` leaves beside the ceiling (what `host-capacity` checks).

The fields behind it are declared `capacity` (sandstack.spec.access): a larger share of the host, never a loosening.
Read from the resolved templates, so a value a template inherits (a profile, `defaults`) counts as the value it had,
not as unset. `--fail-on capacity` counts each pool whose reservation grows (sandstack.review.categories).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandstack.spec.reserve import Amount, Reservations, reservations
from sandstack.spec.resolve import EffectiveLimits, ResolvedStack, pool_sizes
from sandstack.spec.units import GIB, format_cpus, format_size

# Each dimension's words and how its values are shown, in the spec's units.
WORDS = {"sandboxes": "sandboxes", "cpus": "CPUs", "memory": "memory", "disk": "disk", "gpus": "GPUs"}
ORDER = ("sandboxes", "cpus", "memory", "disk", "gpus")
HOST_DIMS = ("cpus", "memory", "disk", "gpus")  # what a host declares


def show(dim: str, value: float) -> str:
    if abs(value) < 1e-9:
        return "0"
    if dim in ("memory", "disk"):
        # Whole units as the spec writes them; a sum of odd sizes in GiB with two decimals (`32.50GiB`, not
        # `33280MiB`), so the cells of one table compare at a glance.
        text = format_size(int(abs(value)))
        if abs(value) >= GIB and not text.endswith(("GiB", "TiB")):
            text = f"{abs(value) / GIB:.2f}GiB"
        return ("-" if value < 0 else "") + text
    if dim == "cpus":
        return format_cpus(value)
    return str(int(value))


def signed(dim: str, value: float) -> str:
    return ("+" if value > 0 else "-") + show(dim, abs(value))


@dataclass(frozen=True)
class CapacityChange:
    pool: str
    text: str  # `memory 1GiB → 2GiB per sandbox`, `sandboxes 2 → 4 (replicas 2 → 4 on 1 host)`

    def to_json(self) -> dict:
        return {"pool": self.pool, "text": self.text}


def compare_capacity(old: ResolvedStack, new: ResolvedStack) -> list[CapacityChange]:
    """Per pool on both sides, what each sandbox gets and how many there are, in words."""
    out = []
    for name in sorted(set(old.pools) & set(new.pools)):
        a, b = old.pools[name], new.pools[name]
        ta, tb = old.templates[a.template], new.templates[b.template]
        for attr, words, fmt in (("cpus", "CPUs", format_cpus), ("memory", "memory", format_size),
                                 ("disk", "disk", format_size)):
            x, y = getattr(ta.limits, attr), getattr(tb.limits, attr)
            if x != y:
                out.append(CapacityChange(name, f"{words} {fmt(x)} → {fmt(y)} per sandbox"))
        before, after = a.replicas * len(a.hosts), b.replicas * len(b.hosts)
        if before != after:
            hosts = f"{len(b.hosts)} host{'s' if len(b.hosts) != 1 else ''}"
            out.append(CapacityChange(name, f"sandboxes {before} → {after} (replicas {a.replicas} → {b.replicas} "
                                            f"on {hosts})"))
        sa, sb = pool_sizes(a, ta.limits), pool_sizes(b, tb.limits)
        for cls in sorted(set(sa) | set(sb)):
            if cls not in sa:
                out.append(CapacityChange(name, f"size class {cls} added: {_size(sb[cls])} per sandbox"))
            elif cls not in sb:
                out.append(CapacityChange(name, f"size class {cls} removed (was {_size(sa[cls])})"))
            else:
                for attr, words, fmt in (("cpus", "CPUs", format_cpus), ("memory", "memory", format_size),
                                         ("disk", "disk", format_size)):
                    x, y = getattr(sa[cls], attr), getattr(sb[cls], attr)
                    if x != y:
                        out.append(CapacityChange(name, f"size class {cls}: {words} {fmt(x)} → {fmt(y)} per sandbox"))
        if a.ceiling * len(a.hosts) != b.ceiling * len(b.hosts) and (a.max is not None or b.max is not None):
            out.append(CapacityChange(name, f"on-demand ceiling {a.ceiling * len(a.hosts)} → "
                                            f"{b.ceiling * len(b.hosts)} sandboxes (max {a.ceiling} → {b.ceiling} "
                                            "per host)"))
        if a.max_hibernated != b.max_hibernated:
            words = {None: "unset (they hold places under max)"}
            out.append(CapacityChange(name, "hibernated sessions counted apart (max_hibernated) "
                                            f"{words.get(a.max_hibernated, a.max_hibernated)} → "
                                            f"{words.get(b.max_hibernated, b.max_hibernated)} per host"))
    return out


def _size(limits: EffectiveLimits) -> str:
    return f"{format_cpus(limits.cpus)} CPUs, {format_size(limits.memory)} memory, {format_size(limits.disk)} disk"


@dataclass(frozen=True)
class Row:
    """One pool, host or the stack: what it reserves before → after, warm and at the ceiling."""

    kind: str  # pool, host, stack
    name: str
    warm: tuple[Amount, Amount]
    ceiling: tuple[Amount, Amount]
    allowed: Amount | None = None  # a host's capacity × overcommit (after)
    capacity: Amount | None = None  # a host's declared capacity (after)
    hosts: tuple[str, ...] = ()  # a pool's hosts (after, or before when removed)

    @property
    def changed(self) -> bool:
        return self.warm[0] != self.warm[1] or self.ceiling[0] != self.ceiling[1]

    @property
    def on_demand(self) -> bool:
        """Whether the ceiling differs from the warm sandboxes on either side (a pool with `max`)."""
        return self.warm[0] != self.ceiling[0] or self.warm[1] != self.ceiling[1]

    def delta(self, which: str = "warm") -> Amount:
        a, b = getattr(self, which)
        return b - a

    def grows(self) -> list[str]:
        """The dimensions it reserves more of, warm or at the ceiling."""
        return [d for d in ORDER if self.delta("warm").get(d) > 1e-9 or self.delta("ceiling").get(d) > 1e-9]

    def headroom(self) -> Amount | None:
        return None if self.allowed is None else self.allowed - self.ceiling[1]

    def shows(self, dim: str) -> bool:
        """Whether the dimension says anything here (GPUs only where there are some)."""
        values = (*self.warm, *self.ceiling, *((self.allowed,) if self.allowed is not None else ()))
        return any(abs(v.get(dim)) > 1e-9 for v in values)

    def cell(self, dim: str) -> str:
        """`2 → 4`, or one value when unchanged; the ceiling after `max` when it differs; a host's allowance; `–`
        where the row has none of it (GPUs on a host without any)."""
        if not self.shows(dim):
            return "–"
        def pair(a: Amount, b: Amount) -> str:
            x, y = a.get(dim), b.get(dim)
            return show(dim, y) if abs(x - y) < 1e-9 else f"{show(dim, x)} → {show(dim, y)}"
        text = pair(*self.warm)
        if self.on_demand:
            text += f" (max {pair(*self.ceiling)})"
        if self.allowed is not None and dim in HOST_DIMS:
            text += f" of {show(dim, self.allowed.get(dim))}"
        return text

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "name": self.name,
                               "warm": {"before": self.warm[0].to_json(), "after": self.warm[1].to_json()},
                               "ceiling": {"before": self.ceiling[0].to_json(), "after": self.ceiling[1].to_json()}}
        if self.kind == "pool":
            out["hosts"] = list(self.hosts)
        if self.allowed is not None and self.capacity is not None:
            headroom = self.headroom()
            assert headroom is not None
            out.update(capacity=self.capacity.to_json(), allowed=self.allowed.to_json(), headroom=headroom.to_json())
        return out


@dataclass(frozen=True)
class Capacity:
    """The change's reservations: changed pools and hosts (in name order) and the stack."""

    pools: tuple[Row, ...]
    hosts: tuple[Row, ...]
    stack: Row

    @property
    def changed(self) -> bool:
        return self.stack.changed or any(r.changed for r in self.pools + self.hosts)

    def fullest(self) -> tuple[Row, str] | None:
        """The changed host and dimension closest to its allowance after the change (the ceiling's share), among
        the dimensions the change moves (any, when it moves none a host declares: sandboxes only)."""
        best: tuple[bool, float, Row, str] | None = None
        for row in self.hosts:
            moved = {d for d in HOST_DIMS if abs(row.delta("ceiling").get(d)) > 1e-9}
            for dim in HOST_DIMS:
                allowed = row.allowed.get(dim) if row.allowed else 0
                used = row.ceiling[1].get(dim)
                if allowed <= 0 or used <= 0:
                    continue
                key = (dim in moved, used / allowed)
                if best is None or key > (best[0], best[1] + 1e-12):
                    best = (*key, row, dim)
        return None if best is None else (best[2], best[3])

    def net(self) -> str:
        """The stack's net change in words: `+16 CPUs, +32GiB memory reserved` (and the ceiling's, when apart)."""
        return grown(self.stack)

    def headline(self) -> str:
        """`Capacity: +2 sandboxes, +2 CPUs, +2GiB memory reserved; host local at 6 of 8 CPUs.` ('' unchanged)."""
        if not self.changed:
            return ""
        text = f"Capacity: {self.net()}"
        full = self.fullest()
        if full is not None:
            row, dim = full
            assert row.allowed is not None
            text += (f"; host {row.name} at {show(dim, row.ceiling[1].get(dim))} of {show(dim, row.allowed.get(dim))}"
                     f" {WORDS[dim]}")
        return text + "."

    def rows(self) -> list[Row]:
        return [*self.pools, *self.hosts, self.stack]

    def lines(self) -> list[str]:
        """Text: a line per changed pool, per changed host (hosts that read alike folded: "hosts a, b (each)") and
        one for the stack, each dimension before → after; then each host's headroom at the ceiling."""
        out = []
        hosts: dict[str, list[str]] = {}
        for row in self.hosts:
            hosts.setdefault("; ".join(f"{WORDS[d]} {row.cell(d)}" for d in ORDER if row.shows(d)), []).append(row.name)
        for row in self.pools:
            out.append(f"pool {row.name} on {', '.join(row.hosts)}: "
                       + "; ".join(f"{WORDS[d]} {row.cell(d)}" for d in ORDER if row.shows(d)))
        out += [f"{folded(names)}: {cells}" for cells, names in hosts.items()]
        out.append("stack: " + "; ".join(f"{WORDS[d]} {self.stack.cell(d)}" for d in ORDER if self.stack.shows(d)))
        room: dict[str, list[str]] = {}
        for row in self.hosts:
            headroom = row.headroom()
            if headroom is not None and row.allowed is not None:
                room.setdefault(", ".join(f"{show(d, headroom.get(d))} {WORDS[d]}" for d in HOST_DIMS
                                          if row.allowed.get(d)), []).append(row.name)
        out += [f"headroom of {folded(names)} at the ceiling: {words}" for words, names in room.items()]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"pools": [r.to_json() for r in self.pools], "hosts": [r.to_json() for r in self.hosts],
                "stack": self.stack.to_json(), "headline": self.headline()}


def folded(hosts: list[str]) -> str:
    """`host a`, or `hosts a, b (each)` for hosts whose lines read alike."""
    return f"host {hosts[0]}" if len(hosts) == 1 else f"hosts {', '.join(hosts)} (each)"


def grown(row: Row) -> str:
    """What a pool or host reserves more of: `+2 sandboxes, +2GiB memory reserved (ceiling +4 sandboxes)`."""
    warm, ceiling = row.delta("warm"), row.delta("ceiling")
    parts = [f"{signed(d, warm.get(d))} {WORDS[d]}" for d in ORDER if abs(warm.get(d)) > 1e-9]
    text = ", ".join(parts) + " reserved" if parts else "no net change warm"
    if ceiling != warm:
        more = [f"{signed(d, ceiling.get(d))} {WORDS[d]}" for d in ORDER if abs(ceiling.get(d)) > 1e-9]
        text += f" (on-demand ceiling: {', '.join(more) or 'unchanged'})"
    return text


def _host_row(name: str, old: Reservations, new: Reservations) -> Row:
    a, b = old.hosts.get(name), new.hosts.get(name)
    zero = Amount()
    after = b or a
    assert after is not None
    return Row("host", name, (a.warm if a else zero, b.warm if b else zero),
               (a.ceiling if a else zero, b.ceiling if b else zero), after.allowed if b else None,
               after.capacity if b else None)


def capacity(old: ResolvedStack, new: ResolvedStack) -> Capacity:
    before, after = reservations(old), reservations(new)
    zero = Amount()
    pools = []
    for name in sorted(set(before.pools) | set(after.pools)):
        a, b = before.pools.get(name), after.pools.get(name)
        row = Row("pool", name, (a.warm if a else zero, b.warm if b else zero),
                  (a.ceiling if a else zero, b.ceiling if b else zero), hosts=(b or a).hosts)  # type: ignore[union-attr]
        if row.changed:
            pools.append(row)
    hosts = [row for name in sorted(set(before.hosts) | set(after.hosts))
             if (row := _host_row(name, before, after)).changed]
    stack = Row("stack", "", (before.warm, after.warm), (before.ceiling, after.ceiling))
    return Capacity(tuple(pools), tuple(hosts), stack)
