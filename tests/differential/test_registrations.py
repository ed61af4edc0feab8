"""Registrations under Pulumi's mocks == the StackPlan's nodes (type, name, parent, provider, inputs, options), for
every committed stack, every review case (both sides) and every change-matrix case (one per schema field)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from sandstack.plan.stack import plan_stack
from sandstack.spec import load_stack
from testbed.provider.mocks import RecordingMocks, run_program
from testbed.specs import STACKS, secret_keys, stack_program, write_spec
from tests.changes import test_change_matrix as matrix
from tests.changes import runs
from tests.changes.runs import case_runs
from tests.differential.compare import compare
from tests.review import cases as review

STACK_FILES = sorted(STACKS.glob("*.yaml"))
COMPARED: dict[str, int] = {}


def _check(path: Path, stack: str, build_root: Path, secrets: dict[str, str] | None = None) -> int:
    resolved = load_stack(path)
    secrets = {**{k: f"value-of-{k}" for k in secret_keys(resolved.spec.model_dump())}, **(secrets or {})}
    mocks = RecordingMocks()
    run_program(stack_program(path, stack, build_root), mocks, stack=stack, secret_config=secrets)
    plan = plan_stack(resolved, stack, build_root=build_root)
    problems = compare(plan, mocks, secrets)
    assert not problems, f"{len(problems)} differences, first: " + "\n".join(problems[:8])
    return len(plan)


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.stem)
def test_a_committed_stack_registers_exactly_its_plan(path: Path, tmp_path: Path):
    assert _check(path, path.stem, tmp_path) > 10


@pytest.mark.parametrize("case", review.PAIRS)
def test_a_review_case_registers_exactly_its_plan(case: str, tmp_path: Path):
    for side, data in zip(("base", "head"), review.pair(case)):
        assert _check(write_spec(tmp_path / side, data, review.FILES), "t", tmp_path / side / "build") > 5


@pytest.mark.parametrize("case", runs.params())
def test_a_single_field_edit_registers_exactly_its_plan(case):
    runs = case_runs(case)  # the change matrix's own two runs (the second on the first's state)
    for side in (runs.base, runs.after):
        problems = compare(side.plan, side.run.mocks, matrix.SECRETS)
        assert not problems, f"{len(problems)} differences, first: " + "\n".join(problems[:8])
        assert len(side.plan) > 5
