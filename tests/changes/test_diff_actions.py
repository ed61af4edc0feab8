"""The diff's action for every resource equals what two successive runs on the engine harness did (its provider
model and Pulumi's dependent rule), for every change-matrix case: one edit of each schema field."""

from __future__ import annotations

import copy

import pytest

from sandstack.plan.stack import plan_stack
from sandstack.review.actions import planned_actions
from sandstack.spec import load_stack
from testbed.specs import write_spec
from tests.changes import test_change_matrix as matrix

PROVIDER = "pulumi:providers:docker"


@pytest.mark.parametrize("case", matrix.CASES, ids=matrix.CASE_IDS)
def test_the_diff_decides_each_action_as_the_engine_run_did(up, tmp_path, case):
    base = copy.deepcopy(matrix.BASE)
    if case.prepare:
        case.prepare(base)
    after = copy.deepcopy(base)
    matrix._set(after, case.spec_path(), case.value)
    runs = up(base, matrix.FILES, matrix.SECRETS), up(after, matrix.FILES, matrix.SECRETS)
    engine: dict[str, str] = {}
    for a in runs[1].actions:  # a create-before-delete replacement also logs its old object's delete
        if a.kind != "same" and engine.get(f"{a.typ}::{a.name}") != "replace":
            engine[f"{a.typ}::{a.name}"] = a.kind
    old, new = ({f"{r.typ}::{r.name}": r.inputs for r in run.registrations.values() if r.typ == PROVIDER}
                for run in runs)
    engine.update({key: "update" for key in new if key in old and old[key] != new[key]})
    plans = [plan_stack(load_stack(write_spec(tmp_path / side, data, matrix.FILES)), "t")
             for side, data in (("base", base), ("after", after))]
    planned = {key: a.action for key, a in planned_actions(*plans).items()}
    differ = {k: (planned.get(k), engine.get(k)) for k in sorted(set(planned) | set(engine))
              if planned.get(k) != engine.get(k)}
    assert not differ, f"(diff, engine) by resource: {differ}"
