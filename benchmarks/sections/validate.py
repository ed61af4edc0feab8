"""Item 1: `sandstack validate` vs `check-jsonschema` on the same file with the same schema, whole process.

Not like for like, in sandstack's disfavour: check-jsonschema runs the JSON Schema only, while `sandstack
validate` runs the schema, then the models, inheritance, the semantic rules (references, capacity, ports,
egress grammar, …) and resolution. Goal: sandstack ≤ 0.5× check-jsonschema's CPU time (median of per-round
ratios); start-up imports are most of both at these sizes.
"""

from __future__ import annotations

from benchmarks.context import SCHEMA, Context, n, sandstack, tool
from benchmarks.measure import Command, of, paired_ratio, rounds, warm
from benchmarks.results import Figure, Goal, SectionResult

TITLE = "validate vs check-jsonschema"
CPU_RATIO_GOAL = Goal("<=", 0.5)


def commands(ctx: Context, label: str) -> dict[str, Command]:
    spec = ctx.spec(label)
    return {
        f"sandstack.{label}": Command(sandstack("validate", spec)),
        f"check-jsonschema.{label}": Command(tool("check-jsonschema") + ["--schemafile", str(SCHEMA), str(spec)]),
    }


def run(ctx: Context) -> SectionResult:
    result = SectionResult("validate", TITLE)
    cases = {}
    for label in ctx.paths:
        cases.update(commands(ctx, label))
    warm(list(cases.values())[:2])
    runs = rounds(cases, ctx.rounds(9, 3), ctx.log)
    for label in ctx.paths:
        ours, theirs = runs[f"sandstack.{label}"], runs[f"check-jsonschema.{label}"]
        result.figures += [
            Figure(f"validate.{label}.sandstack_cpu_s", f"sandstack validate, {n(label)} sandboxes: CPU", "s",
                   of(ours, "cpu")),
            Figure(f"validate.{label}.check_jsonschema_cpu_s", f"check-jsonschema, {n(label)} sandboxes: CPU", "s",
                   of(theirs, "cpu")),
            Figure(f"validate.{label}.cpu_ratio", f"validate / check-jsonschema, {n(label)}: CPU", "×",
                   paired_ratio(ours, theirs, "cpu"), CPU_RATIO_GOAL,
                   profile=cases[f"sandstack.{label}"].argv),
            Figure(f"validate.{label}.wall_ratio", f"validate / check-jsonschema, {n(label)}: wall", "×",
                   paired_ratio(ours, theirs, "wall")),
        ]
    result.notes.append("sandstack validate also runs the models, inheritance, semantic rules and resolution; "
                        "check-jsonschema runs the JSON Schema alone.")
    return result
