"""A change-matrix case's two runs (tests/changes/runs.py) are shared by the tests of this process that judge them
and dropped after the last of them; asked for again, they are made again, the same."""

from __future__ import annotations

import collections
from types import SimpleNamespace

from tests.changes import test_change_matrix as matrix
from tests.changes import runs

CASE = next(case for case in matrix.CASES if case.id == "version")


def _item(nodeid: str, **params) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, callspec=SimpleNamespace(params=params))


def test_a_cases_runs_go_with_the_last_test_that_judges_them_and_come_back_the_same(monkeypatch):
    # This test's own counts and cases: the session's (its matrix tests of the same case) stay as they are.
    for name, fresh in (("_PENDING", collections.Counter()), ("_JUDGES", {}), ("_CASES", {})):
        monkeypatch.setattr(runs, name, fresh)
    ids = [f"tests/x.py::test_{n}[probe]" for n in range(2)]
    runs.expect([_item(ids[0], case=CASE), _item(ids[1], case=CASE),
                 _item("tests/x.py::test_other[version]", case="version"),  # not a matrix case: not counted
                 SimpleNamespace(nodeid="tests/x.py::test_plain")])
    first = runs.case_runs(CASE)
    runs.judged(ids[0])
    assert runs.case_runs(CASE) is first  # one test of it left here: shared
    runs.judged(ids[1])
    assert CASE.id not in runs._CASES
    again = runs.case_runs(CASE)
    assert again is not first
    assert sorted((a.kind, a.typ, a.name) for a in again.after.run.actions) == sorted(
        (a.kind, a.typ, a.name) for a in first.after.run.actions)
    runs.judged(ids[1])  # a test reported twice (a rerun) takes nothing else with it
    assert runs.case_runs(CASE) is again
