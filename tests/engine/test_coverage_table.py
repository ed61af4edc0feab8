"""The committed engine coverage (docs/design/engine-coverage.md) holds every field the plan sets, each applied to the
engine by a test or listed with its reason (tests/engine/coverage_table.py). No Docker: the table's applied column is
from the last full engine run, which `.ci/run` checks again (SANDSTACK_ENGINE_COVERAGE=check)."""

from __future__ import annotations

from tests.engine import coverage_table as table


def test_every_field_the_plan_sets_is_applied_on_the_engine_or_listed_with_a_reason():
    assert table.problems(set(table.committed())) == []


def test_the_committed_table_is_what_its_data_renders():
    # Stale when a field the plan sets was added or dropped, or a reason changed: regenerate from a full engine run.
    applied = table.committed()
    assert set(applied) <= set(table.plan_set_fields()), "the table names fields no plan sets any more"
    rendered = table.render(applied)
    assert _rows(rendered) == _rows(table.TABLE.read_text()), \
        "stale: SANDSTACK_ENGINE_COVERAGE=write bash scripts/test tests/engine, and commit docs/design/engine-coverage.md"


def test_a_field_neither_applied_nor_listed_is_named():
    planned = sorted(set(table.plan_set_fields()) - set(table.NOT_ON_ENGINE))
    found = table.problems(set(planned[1:]))
    assert found == [f"{planned[0]}: the plan sets it (e.g. {sorted(table.plan_set_fields()[planned[0]])[0]}), no "
                     f"engine test applies it and NOT_ON_ENGINE gives no reason"]


def test_a_listed_field_an_engine_test_applies_is_named():
    listed = sorted(table.NOT_ON_ENGINE)[0]
    applied = set(table.plan_set_fields()) - set(table.NOT_ON_ENGINE) | {listed}
    assert table.problems(applied) == [f"{listed}: listed in NOT_ON_ENGINE, yet an engine test applies it"]


def _rows(text: str) -> list[str]:
    # The field, its change and its reason; the test names are the last run's (the check at CI's end keeps them true).
    return [line.split(" | ")[0] + " | " + line.split(" | ")[1] + " | " + line.rsplit(" | ", 1)[-1]
            for line in text.splitlines() if line.startswith("| `")]
