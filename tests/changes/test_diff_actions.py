"""The diff's action for every resource equals what two successive runs on the engine harness did (its provider
model and Pulumi's dependent rule), for every change-matrix case: one edit of each schema field; and the diff gives
every resource it changes a reason (a declared effect, or the engine's dependent rule), never "reason not declared
in the change table"."""

from __future__ import annotations

import pytest

from sandstack.review.actions import planned_actions
from sandstack.review.diff import COMPONENT_TYPE, diff
from sandstack.review.reasons import UNDECLARED
from testbed.specs import STACK
from tests.changes import test_change_matrix as matrix
from tests.changes import runs
from tests.changes.runs import case_runs

PROVIDER = "pulumi:providers:docker"


@pytest.mark.parametrize("case", runs.params())
def test_the_diff_decides_each_action_as_the_engine_run_did(case):
    runs = case_runs(case)
    engine: dict[str, str] = {}
    for a in runs.after.run.actions:  # a create-before-delete replacement also logs its old object's delete
        if a.kind != "same" and engine.get(f"{a.typ}::{a.name}") != "replace":
            engine[f"{a.typ}::{a.name}"] = a.kind
    old, new = ({f"{r.typ}::{r.name}": r.inputs for r in side.run.registrations.values() if r.typ == PROVIDER}
                for side in (runs.base, runs.after))
    engine.update({key: "update" for key in new if key in old and old[key] != new[key]})
    planned = {key: a.action for key, a in planned_actions(runs.base.plan, runs.after.plan).items()}
    differ = {k: (planned.get(k), engine.get(k)) for k in sorted(set(planned) | set(engine))
              if planned.get(k) != engine.get(k)}
    assert not differ, f"(diff, engine) by resource: {differ}"


@pytest.mark.parametrize("case", runs.params())
def test_the_diff_gives_every_changed_resource_a_declared_reason(case):
    """What a reviewer reads for each resource: a field whose declared effect reaches it (or the resource it refers
    to, renewed), so no change of any matrix case is left without one (`UNDECLARED`)."""
    runs = case_runs(case)
    changes = diff(runs.base.stack, runs.after.stack, STACK).changes
    undeclared = sorted(f"{c.action} {c.resource.name}" for c in changes
                        if not c.reasons and not c.renewed_with and not c.resource.type.startswith(COMPONENT_TYPE))
    assert undeclared == [], f"{UNDECLARED}: {undeclared}"
