"""Item 2b: `sandstack preview` and `sandstack diff` at 10 / 100 / 1,000 sandboxes, whole process.

preview prints the default text tree of every resource; diff compares a spec with the same spec where every
template's CPUs changed (every sandbox container is replaced, so diff explains 1,000 replacements).
Goals: preview of 1,000 ≤ 5 s and ≤ 300 MB; 1,000 vs 100 ≤ 11×; diff ≤ 2× a preview of the same size; the
review's capacity part (what the pools reserve per pool, host and the stack, before → after) ≤ 10 % of the diff,
timed in process on the loaded specs (a whole process's start-up would hide it).
"""

from __future__ import annotations

import time

from benchmarks.context import Context, n, sandstack
from benchmarks.measure import Command, Stat, of, paired_ratio, rounds, stat, warm
from benchmarks.results import Figure, Goal, SectionResult

TITLE = "preview and diff"
PREVIEW_WALL_GOAL = Goal("<=", 5.0)
PREVIEW_PEAK_GOAL = Goal("<=", 300.0)
GROWTH_GOAL = Goal("<=", 11.0)
DIFF_RATIO_GOAL = Goal("<=", 2.0)
CAPACITY_SHARE_GOAL = Goal("<=", 0.10)


def capacity_share(ctx: Context, label: str, count: int) -> Stat:
    """The capacity part's time over the whole diff's (which includes it), round by round, in this process."""
    from sandstack.review.capacity import capacity
    from sandstack.review.diff import diff
    from sandstack.spec import load_stack

    old, new = load_stack(ctx.spec(label)), load_stack(ctx.head(label))
    diff(old, new, "bench")  # warm: imports, caches of the change table
    shares = []
    for _ in range(count):
        start = time.perf_counter()
        diff(old, new, "bench")
        middle = time.perf_counter()
        capacity(old, new)
        shares.append((time.perf_counter() - middle) / (middle - start))
    return stat(shares)


def run(ctx: Context) -> SectionResult:
    result = SectionResult("preview", TITLE)
    cases: dict[str, Command] = {}
    for label in ctx.paths:
        cases[f"preview.{label}"] = Command(sandstack("preview", ctx.spec(label)))
        cases[f"diff.{label}"] = Command(sandstack("diff", ctx.spec(label), ctx.head(label)))
    warm([cases["preview.10"]])
    runs = rounds(cases, ctx.rounds(5, 2), ctx.log)
    for label in ctx.paths:
        preview, diff = runs[f"preview.{label}"], runs[f"diff.{label}"]
        big = label == "1000"
        result.figures += [
            Figure(f"preview.{label}.wall_s", f"preview, {n(label)} sandboxes: wall", "s", of(preview, "wall"),
                   PREVIEW_WALL_GOAL if big else None, profile=cases[f"preview.{label}"].argv),
            Figure(f"preview.{label}.peak_mb", f"preview, {n(label)} sandboxes: peak memory", "MB",
                   of(preview, "peak_mb"), PREVIEW_PEAK_GOAL if big else None),
            Figure(f"diff.{label}.wall_s", f"diff, {n(label)} sandboxes: wall", "s", of(diff, "wall")),
            Figure(f"diff.{label}.peak_mb", f"diff, {n(label)} sandboxes: peak memory", "MB", of(diff, "peak_mb")),
            Figure(f"diff.{label}.preview_ratio", f"diff / preview, {n(label)}: wall", "×",
                   paired_ratio(diff, preview, "wall"), DIFF_RATIO_GOAL, profile=cases[f"diff.{label}"].argv),
        ]
    result.figures.append(Figure("diff.1000.capacity_share", "capacity / diff, 1,000 sandboxes: wall, in process",
                                 "×", capacity_share(ctx, "1000", ctx.rounds(5, 2)), CAPACITY_SHARE_GOAL))
    result.figures.append(Figure("preview.growth_1000_100", "preview, 1,000 vs 100: wall growth", "×",
                                 paired_ratio(runs["preview.1000"], runs["preview.100"], "wall"), GROWTH_GOAL,
                                 profile=cases["preview.1000"].argv))
    return result
