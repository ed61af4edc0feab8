"""Item 3: `sandstack check` (built-in rules and the example organisation policies, policies/*.yaml) vs
`sandstack validate` on the 1,000-sandbox spec, whole process. Goal: check ≤ 2× validate (CPU)."""

from __future__ import annotations

from benchmarks.context import POLICIES, Context, n, sandstack
from benchmarks.measure import Command, of, paired_ratio, rounds, warm
from benchmarks.results import Figure, Goal, SectionResult

TITLE = "check vs validate"
RATIO_GOAL = Goal("<=", 2.0)
LABEL = "1000"


def run(ctx: Context) -> SectionResult:
    result = SectionResult("check", TITLE)
    policies = [arg for path in POLICIES for arg in ("--policy", str(path))]
    spec = ctx.spec(LABEL)
    cases = {
        # check exits 1 when it finds something: a finding is a result here, not a failure.
        "check": Command(sandstack("check", *policies, spec), ok=(0, 1)),
        "validate": Command(sandstack("validate", spec)),
    }
    warm(list(cases.values()))
    runs = rounds(cases, ctx.rounds(7, 2), ctx.log)
    result.figures += [
        Figure(f"check.{LABEL}.cpu_s", f"check, {n(LABEL)} sandboxes, {len(POLICIES)} policy files: CPU", "s",
               of(runs["check"], "cpu")),
        Figure(f"check.{LABEL}.validate_cpu_s", f"validate, {n(LABEL)} sandboxes: CPU", "s",
               of(runs["validate"], "cpu")),
        Figure(f"check.{LABEL}.cpu_ratio", f"check / validate, {n(LABEL)}: CPU", "×",
               paired_ratio(runs["check"], runs["validate"], "cpu"), RATIO_GOAL, profile=cases["check"].argv),
        Figure(f"check.{LABEL}.peak_mb", f"check, {n(LABEL)} sandboxes: peak memory", "MB",
               of(runs["check"], "peak_mb")),
    ]
    return result
