"""Pytest fixtures and hooks of the engine harness.

Make them available to a test folder with, in its conftest.py:

    from testbed.harness.fixtures import *  # noqa: F401,F403  (fixtures + coverage hooks)

Fixtures:
  docker_harness  -- a fresh Harness on the local daemon per test; ALWAYS torn down (destroy + label
                     sweep), then fails the test if anything labelled with its session remains or a
                     field it `proves()` was never applied. Depends on `docker_client` (tests/conftest.py).
  dry_harness     -- the same state semantics without a daemon (plausible outputs).
  recording_mocks -- a fresh RecordingMocks (single run, dry) for `run_program(...)`.
Hooks: write the coverage report at session end and print a one-line summary. Under pytest-xdist each worker
hands what it recorded to the controller (`workeroutput`), which merges them and writes the one report.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.harness import coverage
from testbed.harness.harness import Harness
from testbed.provider.mocks import RecordingMocks, current_test

__all__ = ["harness_sweep_orphans", "docker_harness", "dry_harness", "recording_mocks",
           "pytest_runtest_makereport", "pytest_sessionfinish", "pytest_testnodedown", "pytest_terminal_summary"]

_REPORTED: dict[str, object] = {}  # hooks may be imported into several conftests: act once


@pytest.fixture(scope="session")
def harness_sweep_orphans(docker_client):
    """Once per session: remove what killed earlier test runs left behind (their pid is gone)."""
    from testbed.harness.teardown import sweep_orphans

    removed = sweep_orphans(docker_client.api)
    if removed:
        print(f"\n[harness] removed leftovers of dead sessions: {removed}")
    return removed


@pytest.fixture
def docker_harness(harness_sweep_orphans, request):
    harness = Harness()
    test = current_test() or request.node.nodeid
    try:
        yield harness
    finally:
        swept = harness.teardown()
        from testbed.harness.teardown import remaining

        left = remaining(harness.backend.api, harness.session_id)
        assert not left, f"harness session {harness.session_id} left objects behind: {left}"
        if swept:  # destroy() should have removed everything the state knew about
            print(f"\n[harness] label sweep removed objects the state did not know: {swept}")
        unproven = coverage.unproven_claims(test)
        call = getattr(request.node, "harness_call_report", None)
        if unproven and call is not None and call.passed:  # a failed test already says why
            pytest.fail(f"{test} claims to prove {unproven} but never applied them to the engine", pytrace=False)


@pytest.fixture
def dry_harness():
    with Harness.dry() as harness:
        yield harness


@pytest.fixture
def recording_mocks():
    return RecordingMocks()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":  # lets docker_harness check `proves()` claims only for passing tests
        item.harness_call_report = report


def pytest_sessionfinish(session, exitstatus):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller writes the one report
        workeroutput["harness_coverage"] = coverage.export()
        return
    if "written" in _REPORTED:
        return
    _REPORTED["written"] = coverage.write(Path(str(session.config.rootpath)))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller: a worker ended; merge what it recorded."""
    recorded = getattr(node, "workeroutput", {}).get("harness_coverage")
    if recorded:
        coverage.merge(recorded)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if "printed" in _REPORTED or not _REPORTED.get("written"):
        return
    _REPORTED["printed"] = True
    terminalreporter.write_line(f"{coverage.summary()} (table: {_REPORTED['written']})")
