"""The suite's worker groups (tests/conftest.py `worker_group`, used by its pytest-xdist scheduler): every Docker test
in one worker, a change-matrix case's three suites in one worker. Decided from node ids, so a Docker test outside
tests/engine would run beside the others on the same daemon: none may be."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import worker_group

TESTS = Path(__file__).resolve().parents[1]
DOCKER_MARK = re.compile(r"mark\.docker\b|\bdocker_client\b|\bdocker_harness\b")


def test_no_test_outside_tests_engine_uses_docker():
    found = [str(path.relative_to(TESTS.parent)) for path in TESTS.rglob("*.py")
             if "engine" not in path.relative_to(TESTS).parts[:1] and path.name != "conftest.py"
             and "node_modules" not in path.parts and DOCKER_MARK.search(path.read_text())]
    assert found == [], f"Docker tests outside tests/engine run beside the others: {found}"


def test_engine_tests_share_one_group_and_matrix_cases_their_own():
    assert worker_group("tests/engine/test_runtime.py::test_a_session_from_claim_to_release") == "docker"
    assert worker_group("tests/engine/harness/test_harness.py::test_x[a]") == "docker"
    assert worker_group("tests/changes/test_change_matrix.py::test_a_field[pools.*.max#url ports]") == \
        worker_group("tests/differential/test_registrations.py::test_b[pools.*.max#url ports]") == \
        "matrix:pools.*.max#url ports"
    assert worker_group("tests/spec/test_rules.py::test_rule[platform]") is None
