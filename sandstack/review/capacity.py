"""The capacity part of a change, per pool, from the resolved specs: what each sandbox gets (CPUs, memory, disk)
and how many there are (replicas × hosts), before → after in the spec's units. The fields are declared `capacity`
(sandstack.spec.access): a larger share of the host, never a loosening. Read from the resolved templates, so a
value a template inherits (a profile, `defaults`) shows as the value it had, not as unset."""

from __future__ import annotations

from dataclasses import dataclass

from sandstack.spec.resolve import ResolvedStack
from sandstack.spec.units import format_cpus, format_size


@dataclass(frozen=True)
class CapacityChange:
    pool: str
    text: str  # `memory 1GiB → 2GiB`, `sandboxes 2 → 4 (replicas 2 → 4 on 1 host)`

    def to_json(self) -> dict:
        return {"pool": self.pool, "text": self.text}


def compare_capacity(old: ResolvedStack, new: ResolvedStack) -> list[CapacityChange]:
    out = []
    for name in sorted(set(old.pools) & set(new.pools)):
        a, b = old.pools[name], new.pools[name]
        ta, tb = old.templates[a.template], new.templates[b.template]
        for attr, words, show in (("cpus", "CPUs", format_cpus), ("memory", "memory", format_size),
                                  ("disk", "disk", format_size)):
            x, y = getattr(ta.limits, attr), getattr(tb.limits, attr)
            if x != y:
                out.append(CapacityChange(name, f"{words} {show(x)} → {show(y)} per sandbox"))
        before, after = a.replicas * len(a.hosts), b.replicas * len(b.hosts)
        if before != after:
            hosts = f"{len(b.hosts)} host{'s' if len(b.hosts) != 1 else ''}"
            out.append(CapacityChange(name, f"sandboxes {before} → {after} (replicas {a.replicas} → {b.replicas} "
                                            f"on {hosts})"))
    return out
