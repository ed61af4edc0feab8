"""The proof's coverage: every pulumi-docker field the plan sets is applied to the Docker engine by some engine test,
or listed here with the reason no engine test can (docs/design/engine-coverage.md, generated).

"The plan sets" is read off the plans of the committed stacks, the examples' spec, both sides of every review case and
of every change-matrix case (one edit of each spec field): plain plans, no Pulumi. "Applied on the engine" is what an
engine session's harness recorded (testbed/harness/coverage.py). The committed table joins the two:

- tests/engine/test_coverage_table.py (no Docker) fails when a field the plan sets is neither applied in the committed
  table nor listed in NOT_ON_ENGINE, when a listed field is applied after all or no longer set, or when the table is
  not what its data renders;
- a run with SANDSTACK_ENGINE_COVERAGE=check (`.ci/run`) fails when the engine tests of this run did not apply a field
  the committed table says they apply; SANDSTACK_ENGINE_COVERAGE=write regenerates the table from the run (do it
  after a full engine run: `SANDSTACK_ENGINE_COVERAGE=write bash scripts/test tests/engine`).
"""

from __future__ import annotations

import copy
import functools
import re
import tempfile
from pathlib import Path

import pytest

from sandstack.plan.stack import plan_stack
from sandstack.spec import load_stack
from testbed.harness import coverage
from testbed.provider.tables import MAPPINGS
from testbed.specs import REPO, STACK, STACKS, write_spec

TABLE = REPO / "docs" / "design" / "engine-coverage.md"
BEGIN, END = "<!-- BEGIN engine coverage (generated) -->", "<!-- END engine coverage -->"

# Fields the plan sets that no engine test can apply here, each with its reason.
GPU = ("this engine has no NVIDIA GPU nor its container runtime; the request (driver nvidia, capability gpu) is "
       "checked under mocks (tests/components/test_sandbox_container.py)")
REGISTRY = ("the image registry is outside this machine (nothing here may push or pull); the push is checked under "
            "mocks (tests/components/test_snapshot.py)")
NOT_ON_ENGINE: dict[str, str] = {
    # The disk quota of a writable layer needs overlay2 on xfs mounted with pquota; this engine's overlay2 is on ext4.
    "Container.storageOpts": "overlay2 here is on ext4, and a size quota needs xfs with pquota (Docker refuses the "
                             "option); the value is checked under mocks (tests/plan/test_sandbox_plan.py)",
    "Container.deviceRequests": GPU,
    "Container.deviceRequests.driver": GPU,
    "Container.deviceRequests.deviceIds": GPU,
    "Container.deviceRequests.capabilities": GPU,
    "RegistryImage.name": REGISTRY,
    "RegistryImage.keepRemotely": REGISTRY,
}


@functools.cache
def plan_set_fields() -> dict[str, frozenset[str]]:
    """"Title.path" -> the specs whose plans set it (by a short name)."""
    from tests.changes import test_change_matrix as matrix
    from tests.review import cases as review

    found: dict[str, set[str]] = {}
    with tempfile.TemporaryDirectory(prefix="sandstack-coverage-") as folder:
        root = Path(folder)

        def add(source: str, path: Path) -> None:
            for field in coverage.plan_fields(plan_stack(load_stack(path), STACK)):
                found.setdefault(field, set()).add(source)

        for path in sorted(STACKS.glob("*.yaml")):
            add(f"stacks/{path.name}", path)
        add("examples/sandboxes.yaml", REPO / "examples" / "sandboxes.yaml")
        for case in review.PAIRS:
            for side, data in zip(("base", "head"), review.pair(case)):
                add(f"review case {case}", write_spec(root / f"review-{case}-{side}", data, review.FILES))
        for i, case in enumerate(matrix.CASES):
            base = copy.deepcopy(matrix.BASE)
            if case.prepare:
                case.prepare(base)
            after = copy.deepcopy(base)
            matrix._set(after, case.spec_path(), case.value)
            for side, data in (("base", base), ("after", after)):
                add(f"matrix case {case.id}", write_spec(root / f"matrix-{i}-{side}", data, matrix.FILES))
    return {field: frozenset(sources) for field, sources in found.items()}


@functools.cache
def _positions() -> dict[str, int]:
    return {field: i for i, field in enumerate(coverage.all_fields())}


def _order(field: str) -> int:
    """The harness tables' order (each type's fields as its table lists them)."""
    return _positions()[field]


def render(applied: dict[str, list[str]]) -> str:
    """The table, from the fields the plan sets, `applied` (field -> engine tests) and NOT_ON_ENGINE."""
    fields = sorted(plan_set_fields(), key=_order)
    rows = []
    for field in fields:
        title, _, path = field.partition(".")
        top = next(m for m in MAPPINGS.values() if m.title == title).by_name[path.split(".")[0]]
        tests = sorted(applied.get(field, ()))
        shown = "<br>".join(t.split("tests/", 1)[-1] for t in tests[:3]) + \
            (f"<br>(+{len(tests) - 3} more)" if len(tests) > 3 else "")
        rows.append(f"| `{field}` | {top.change} | {shown or '—'} | {NOT_ON_ENGINE.get(field, '')} |")
    covered = sum(1 for f in fields if applied.get(f))
    return (f"# Engine coverage: every provider field the plan sets, proven on the engine\n\n"
            f"Generated by tests/engine/coverage_table.py from a full engine run "
            f"(`SANDSTACK_ENGINE_COVERAGE=write bash scripts/test tests/engine`); do not edit. The plan sets "
            f"{len(fields)} of the {len(coverage.all_fields())} fields the harness maps (committed stacks, the "
            f"examples, every review and change-matrix case); {covered} are applied to the engine by the tests named, "
            f"{len(NOT_ON_ENGINE)} cannot be here, for the reason given.\n\n"
            f"{BEGIN}\n| Field | Change | Applied on the engine by | Not on this engine because |\n|---|---|---|---|\n"
            + "\n".join(rows) + f"\n{END}\n")


def committed() -> dict[str, list[str]]:
    """The committed table's applied column: field -> the tests it names (only the first three of each)."""
    out: dict[str, list[str]] = {}
    text = TABLE.read_text() if TABLE.exists() else ""
    for line in text.splitlines():
        row = re.match(r"\| `([^`]+)` \| [^|]+ \| (.*?) \|", line)
        if row and row.group(2) != "—":
            out[row.group(1)] = [t for t in row.group(2).split("<br>") if not t.startswith("(+")]
    return out


def engine_applied() -> dict[str, list[str]]:
    """What this process's engine tests applied (after pytest-xdist merged the workers' records)."""
    return {field: sorted(coverage.tests_using(field)) for field in coverage.all_fields() if coverage.tests_using(field)}


def problems(applied: set[str]) -> list[str]:
    """How the fields the plan sets stand against `applied` and NOT_ON_ENGINE (empty: every one is proven or
    listed)."""
    planned = plan_set_fields()
    out = [f"{f}: the plan sets it (e.g. {sorted(planned[f])[0]}), no engine test applies it and NOT_ON_ENGINE "
           f"gives no reason" for f in sorted(planned, key=_order) if f not in applied and f not in NOT_ON_ENGINE]
    out += [f"{f}: listed in NOT_ON_ENGINE, yet an engine test applies it" for f in sorted(NOT_ON_ENGINE)
            if f in applied]
    out += [f"{f}: listed in NOT_ON_ENGINE, but no plan sets it" for f in sorted(NOT_ON_ENGINE) if f not in planned]
    return out


# --- the session's end: check or write (SANDSTACK_ENGINE_COVERAGE), as a plugin of tests/conftest.py -------------------

def pytest_sessionfinish(session, exitstatus):
    import os

    mode = os.environ.get("SANDSTACK_ENGINE_COVERAGE", "")
    if mode not in ("check", "write") or hasattr(session.config, "workeroutput"):  # the controller decides
        return
    applied = engine_applied()
    if not applied:
        return  # no engine test ran: nothing to say about the engine
    if mode == "write":
        TABLE.write_text(render(applied))
        session.config._engine_coverage = [f"engine coverage: wrote {TABLE.relative_to(REPO)}"]
        return
    missing = sorted(set(committed()) - set(applied), key=_order)
    found = [f"{f}: the committed table says an engine test applies it; none of this run did" for f in missing]
    found += problems(set(applied))
    session.config._engine_coverage = found or ["engine coverage: every field the plan sets is applied or listed"]
    if found and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for line in getattr(config, "_engine_coverage", ()):
        terminalreporter.write_line(line)
