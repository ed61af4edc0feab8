"""Item 2a: the Pulumi program under mocks (benchmarks/mock_program.py) at 10 / 100 / 1,000 sandboxes.

What `pulumi up` spends in sandstack's Python before the engine does anything: loading the spec, building
the plan, constructing every component and resource, resolving every output. Goal: 1,000 sandboxes ≤ 10 s.
"""

from __future__ import annotations

import json

from benchmarks.context import Context, n, python_module
from benchmarks.measure import Command, of, paired_ratio, rounds, warm
from benchmarks.results import Figure, Goal, SectionResult

TITLE = "Pulumi program under mocks"
WALL_1000_GOAL = Goal("<=", 10.0)


def run(ctx: Context) -> SectionResult:
    result = SectionResult("program", TITLE)
    # The 1,000 case takes tens of seconds: --quick runs it once (its n says so).
    cases = {label: Command(python_module("benchmarks.mock_program", ctx.spec(label)),
                            rounds=1 if ctx.quick and label == "1000" else None)
             for label in ctx.paths}
    warm([cases["10"]])
    runs = rounds(cases, ctx.rounds(5, 3), ctx.log)
    for label, label_runs in runs.items():
        registrations = json.loads(label_runs[-1].stdout.splitlines()[-1])["registrations"]
        goal = WALL_1000_GOAL if label == "1000" else None
        result.figures += [
            Figure(f"program.{label}.wall_s", f"program, {n(label)} sandboxes ({registrations} registrations): wall",
                   "s", of(label_runs, "wall"), goal, profile=cases[label].argv),
            Figure(f"program.{label}.peak_mb", f"program, {n(label)} sandboxes: peak memory", "MB",
                   of(label_runs, "peak_mb")),
        ]
    result.figures.append(Figure("program.growth_1000_100", "program, 1,000 vs 100: wall growth", "×",
                                 paired_ratio(runs["1000"], runs["100"], "wall")))
    result.notes.append("Mocks echo inputs back with the computed outputs the components read "
                        "(benchmarks/mock_program.py); the test suite's recording harness, which also checks "
                        "every field against the provider schema, costs more and is not measured here.")
    return result
