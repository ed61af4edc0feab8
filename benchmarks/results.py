"""What a benchmark section returns: figures (a statistic, its unit, the goal beside it) or a skip reason.

    Figure("preview.1000.wall_s", "sandstack preview, 1,000 sandboxes: wall", "s", stat, Goal("<=", 5))

A goal is judged on the median: on a shared machine one slow run is noise, a slow median is not.
Keys are stable (`section.case.metric_unit`): CI and the README compare runs by them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks.measure import Stat

OPS = {"<=": "≤", ">=": "≥"}


@dataclass(frozen=True)
class Goal:
    op: str        # "<=" or ">="
    limit: float
    source: str = ""  # where the goal comes from, when not the list

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"goal operator must be one of {sorted(OPS)}, not {self.op!r}")

    def met(self, value: float) -> bool:
        return value <= self.limit if self.op == "<=" else value >= self.limit


@dataclass
class Figure:
    key: str
    label: str
    unit: str              # "s", "ms", "MB", "MiB", "×"
    stat: Stat
    goal: Goal | None = None
    profile: list[str] | None = None  # argv to profile when the goal is missed (--profile)

    @property
    def met(self) -> bool | None:
        return None if self.goal is None else self.goal.met(self.stat.median)

    def as_json(self) -> dict:
        return {
            "key": self.key, "label": self.label, "unit": self.unit,
            "median": round(self.stat.median, 6), "min": round(self.stat.min, 6), "max": round(self.stat.max, 6),
            "n": self.stat.n,
            "goal": None if self.goal is None else {"op": self.goal.op, "limit": self.goal.limit},
            "met": self.met,
        }


@dataclass
class SectionResult:
    name: str
    title: str
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None   # one line: why the section did not run (or how it failed)
    failed: bool = False         # it ran and raised: `skipped` holds the error
    seconds: float = 0.0         # how long the section took, benchmarks included

    @property
    def missed(self) -> list[Figure]:
        return [f for f in self.figures if f.met is False]

    def as_json(self) -> dict:
        return {
            "name": self.name, "title": self.title,
            "status": "failed" if self.failed else "skipped" if self.skipped else "ran",
            "reason": self.skipped, "seconds": round(self.seconds, 1), "notes": list(self.notes),
            "figures": [f.as_json() for f in self.figures],
        }
