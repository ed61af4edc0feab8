"""Suite-wide test plumbing: the `docker` marker and a shared Docker client.

Tests marked `docker` need a reachable Docker daemon. Without one they are skipped with a one-line
reason, unless SANDSTACK_REQUIRE_DOCKER=1 (CI sets it), where they fail instead: CI must never pass
because the engine tests silently did not run.
"""

from __future__ import annotations

import functools
import gc
import os
import sys

import pytest

# This machine sets PYTHONDONTWRITEBYTECODE, with which every pytest process (each xdist worker, and the collections
# tests/packaging starts) rewrote the ~600 test modules' asserts and compiled sandstack from source again: 13 s of CPU
# per collection instead of 5 s. The suite writes its bytecode as Python does by default (`__pycache__` is
# git-ignored); the processes it starts inherit that (docs/performance.md, "The no-Docker suite").
if sys.dont_write_bytecode:
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def _require_docker() -> bool:
    return os.environ.get("SANDSTACK_REQUIRE_DOCKER") == "1"


@functools.lru_cache(maxsize=1)
def _docker_unavailable_reason() -> str | None:
    """None when a daemon answers, else one line saying why not (checked once per session)."""
    try:
        import docker
    except ImportError:
        return "the docker Python package is not installed (pip install -e '.[test]')"
    try:
        client = docker.from_env(timeout=10)
        client.ping()
        client.close()
    except Exception as error:  # any failure to reach the daemon means the same thing here
        first_line = (str(error).splitlines() or [type(error).__name__])[0]
        return f"no Docker daemon answers ({first_line[:160]})"
    return None


def _skip_or_fail(reason: str) -> None:
    if _require_docker():
        pytest.fail(f"SANDSTACK_REQUIRE_DOCKER=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def pytest_configure(config: pytest.Config) -> None:
    # The engine coverage's check or rewrite at the session's end (SANDSTACK_ENGINE_COVERAGE, tests/engine/coverage_table.py).
    from tests.engine import coverage_table

    config.pluginmanager.register(coverage_table, "sandstack-engine-coverage")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The smoke tier's marks (tests/smoke.py)."""
    from tests.smoke import is_smoke

    for item in items:
        if is_smoke(item.nodeid):
            item.add_marker(pytest.mark.smoke)


# Every test under tests/engine (where every Docker test lives: tests/packaging/test_layers.py holds that) runs in one
# pytest-xdist worker, one after another: they share one daemon, its networks' address space, the host's firewall and
# its namespaces; the other workers run the rest. Decided on the controller, which sees node ids only (no marks). Not
# with xdist's own `xdist_group` mark: under pytest 9 the node id suffix that mark relies on is no longer read (node ids
# are pytest's own), so Docker tests ran on two workers at once (the last CI run's failures).
# Likewise, the three suites that judge one change-matrix case (tests/changes/runs.py) run in one worker, which makes
# the case's two runs once and shares them: their node ids end in the case's id.
ENGINE_TESTS = "tests/engine/"
MATRIX_SUITES = ("tests/changes/test_change_matrix.py::", "tests/changes/test_diff_actions.py::",
                 "tests/differential/test_registrations.py::")


def worker_group(nodeid: str) -> str | None:
    """The worker group a test runs in (None: any worker)."""
    if nodeid.startswith(ENGINE_TESTS):
        return "docker"
    if nodeid.startswith(MATRIX_SUITES) and nodeid.endswith("]"):
        return "matrix:" + nodeid[nodeid.index("[") + 1:-1]
    return None


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class Grouped(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid) or super()._split_scope(nodeid)

    return Grouped(config, log)


def pytest_collection_finish(session: pytest.Session) -> None:
    # What collection made (modules, ~4,700 items, their marks) lives to the session's end: frozen, the collector's
    # full passes no longer walk it (they ran ~50 times in a change-matrix worker, each over all of it).
    gc.collect()
    gc.freeze()
    # Each change-matrix case's runs are kept while a test of this process still judges them (tests/changes/runs.py).
    runs = sys.modules.get("tests.changes.runs")  # imported when a suite that judges the cases was collected
    if runs is not None:
        runs.expect(session.items)


def pytest_runtest_logfinish(nodeid: str, location: tuple) -> None:
    runs = sys.modules.get("tests.changes.runs")
    if runs is not None:
        runs.judged(nodeid)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("docker") is not None:
        reason = _docker_unavailable_reason()
        if reason is not None:
            _skip_or_fail(reason)


@pytest.fixture(scope="session")
def docker_client():
    """A Docker SDK client for the local daemon (skips or fails like the `docker` marker without one)."""
    reason = _docker_unavailable_reason()
    if reason is not None:
        _skip_or_fail(reason)
    import docker

    client = docker.from_env(timeout=120)
    _sweep_dead_runs(client)
    yield client
    client.close()


def _sweep_dead_runs(client) -> None:
    """Once per session, before any Docker test: what killed runs left on this machine goes (the harness's
    objects, the net tests' labs, the extra test hosts' namespaces), each found by a process id that no longer
    runs. A session stopped mid-run leaves containers whose restart policy brings them back with the daemon
    (holding their published ports), networks holding subnets, and namespaces holding names."""
    from testbed.harness.teardown import sweep_orphans
    from testbed.hosts import sweep_dead_hosts
    from tests.engine.net.lab import sweep_dead_labs

    removed = {"harness": sweep_orphans(client.api), "hosts": sweep_dead_hosts()}
    sweep_dead_labs(client)
    if any(removed.values()):
        print(f"\n[tests] removed what dead test runs left: {removed}")


# The engine harness's fixtures (docker_harness, dry_harness, recording_mocks) and its coverage hooks, for every
# folder: here, so that pytest-xdist's controller (which collects nothing and loads only this conftest) merges the
# workers' coverage records and writes the one report.
from testbed.harness.fixtures import *  # noqa: E402,F401,F403
