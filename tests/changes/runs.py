"""Each change-matrix case's two `pulumi up`s on the dry harness, made once per test process and judged by three
suites: the change matrix (what the second run did is what the field declares, test_change_matrix.py), the diff's
actions (the review decides each resource's action as the run did, test_diff_actions.py) and the differential test
(each run registers exactly its plan, tests/differential/test_registrations.py).

Each of them used to run the program twice per case on its own: ~1,900 program runs of ~0.2 s for 312 cases. Here the
base stack (after the case's `prepare`, keyed by its content) is applied once and its state forked for every case
that starts from it (`Harness.fork`), so a case costs one run of its edited spec; the plans of both sides are made
from the very files the runs read. Nothing is judged here: every assertion stays in its suite.

A case's runs are dropped once the last test of this process that judges them is done (`expect`, `judged`: the root
conftest counts the collected tests of each case and reports each one's end). Kept to the session's end, the ~360
cases' registrations, states and plans made each of the collector's full passes slower as the matrix went on: the
garbage collector took a quarter of a matrix worker's CPU. A case asked for again (a rerun) is simply made again.
"""

from __future__ import annotations

import atexit
import collections
import copy
import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import pytest

from sandstack.plan.stack import StackPlan, plan_stack
from sandstack.spec import load_stack
from sandstack.spec.resolve import ResolvedStack
from testbed.harness.harness import Harness, RunResult
from testbed.specs import STACK, stack_program, write_spec
from tests.changes import test_change_matrix as matrix


@dataclass(frozen=True)
class Side:
    spec: dict  # the spec data of this side
    path: Path  # the spec file the run read (its folder holds the matrix's files and the build context)
    run: RunResult
    plan: StackPlan  # planned from the same file and build root as the run
    # The file as loaded then (the base's file is overwritten by its cases' edits: read the spec from here).
    stack: ResolvedStack


@dataclass(frozen=True)
class CaseRuns:
    base: Side  # the first `pulumi up`: the base stack (with the case's `prepare`) on an empty state
    after: Side  # the second: the edited spec on the base's state


_ROOT: list[Path] = []
_BASES: dict[str, tuple[Side, Harness]] = {}
_CASES: dict[str, CaseRuns] = {}
_PENDING: collections.Counter[str] = collections.Counter()  # case id -> its tests not yet done in this process
_JUDGES: dict[str, str] = {}  # node id of a collected test that judges a case's runs -> the case's id


def _root() -> Path:
    if not _ROOT:
        _ROOT.append(Path(tempfile.mkdtemp(prefix="sandstack-matrix-")))
        atexit.register(shutil.rmtree, _ROOT[0], True)
    return _ROOT[0]


def _side(data: dict, folder: Path, harness: Harness) -> Side:
    path = write_spec(folder, data, matrix.FILES)
    run = harness.run(stack_program(path), secret_config=matrix.SECRETS)
    stack = load_stack(path)
    return Side(copy.deepcopy(data), path, run, plan_stack(stack, STACK, build_root=path.parent / "build"), stack)


def _base(data: dict) -> tuple[Side, Harness]:
    key = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]
    if key not in _BASES:
        harness = Harness.dry()
        _BASES[key] = _side(data, _root() / key, harness), harness
    return _BASES[key]


def params(xfail: bool = False) -> list:
    """The matrix's cases as pytest parameters, each in an xdist group of its own: under `--dist loadgroup` the three
    suites' tests of one case run in the same process and share its runs. `xfail`: the matrix's own expected
    failures (the other suites judge those cases' runs as any other)."""
    out = []
    for case in matrix.CASES:
        marks = [pytest.mark.xdist_group(f"matrix:{case.id}")]
        if xfail and case.xfail:
            marks.append(pytest.mark.xfail(strict=True, raises=case.raises, reason=case.xfail))
        out.append(pytest.param(case, id=case.id, marks=marks))
    return out


def case_runs(case: matrix.Case) -> CaseRuns:
    """The case's two runs (made on first use in this process, then shared)."""
    if case.id not in _CASES:
        data = copy.deepcopy(matrix.BASE)
        if case.prepare:
            case.prepare(data)
        base, harness = _base(data)
        after = copy.deepcopy(data)
        matrix._set(after, case.spec_path(), case.value)
        _CASES[case.id] = CaseRuns(base, _side(after, base.path.parent, harness.fork()))
    return _CASES[case.id]


def expect(items: Iterable[pytest.Item]) -> None:
    """Counts, per case, the collected tests that judge its runs (the root conftest calls this once collected)."""
    for item in items:
        case = item.callspec.params.get("case") if hasattr(item, "callspec") else None
        if isinstance(case, matrix.Case):
            _JUDGES[item.nodeid] = case.id
            _PENDING[case.id] += 1


def judged(nodeid: str) -> None:
    """A test is done (the root conftest calls this after each one): the case's runs go with its last test here."""
    case_id = _JUDGES.pop(nodeid, None)
    if case_id is None:
        return
    _PENDING[case_id] -= 1
    if _PENDING[case_id] <= 0:
        del _PENDING[case_id]
        _CASES.pop(case_id, None)
