"""A started sandbox is handed back once its readiness probe passes, run by the runtime itself while Docker's
first scheduled check is still to come (sandstack/runtime/readiness.py), over the fake backend."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from sandstack.plan.recipe import OnDemand
from sandstack.runtime.readiness import Probe, probe_of
from tests.runtime.ondemand_helpers import COMMON, PLACES, WARM, od_config, od_env, recipe


def _with_probe(test: list[str], wait_seconds: int = 5) -> OnDemand:
    base = recipe()
    common = {**COMMON, "WorkingDir": "/workspace", "Healthcheck": {"Test": test, "Timeout": 2_000_000_000}}
    return OnDemand(ceiling=base.ceiling, common=common, places=base.places, wait_seconds=wait_seconds)


def _env(tmp_path, test: list[str], wait_seconds: int = 5):
    config = od_config()
    pools = {"od": replace(config.pools["od"], ondemand=_with_probe(test, wait_seconds))}
    env = od_env(tmp_path, config=replace(config, pools=pools))
    for place in PLACES:  # Docker's first scheduled check has not run yet: it says 'starting' throughout
        env.backend.provisioner.health_of[place] = "starting"
    return env


@pytest.mark.parametrize(("test", "expected"), [
    (["CMD", "curl", "-f", "http://127.0.0.1:8080/"], Probe(["curl", "-f", "http://127.0.0.1:8080/"], "/w", 3.0)),
    (["CMD-SHELL", "test -e /tmp/up"], Probe(["/bin/sh", "-c", "test -e /tmp/up"], "/w", 3.0)),
    (["NONE"], None),
    ([], None),
])
def test_the_probe_is_dockers_health_check_command_as_the_container_holds_it(test, expected):
    assert probe_of({"Test": test, "Timeout": 3_000_000_000}, "/w") == expected


def test_docker_default_timeout_and_working_directory_apply_when_the_container_sets_none():
    assert probe_of({"Test": ["CMD", "true"]}, None) == Probe(["true"], "/", 30.0)
    assert probe_of(None, "/w") is None


def test_a_claim_is_handed_back_as_soon_as_the_probe_passes_before_dockers_first_check(tmp_path):
    od = _env(tmp_path, ["CMD", "test", "-d", "."])
    od.claim("warm", pool="od")
    before = len(od.backend.calls)
    answer = od.claim("new", pool="od")
    assert (answer["sandbox"], answer["status"]) == (PLACES[0], "bound")
    # Docker still says 'starting' (it does throughout): the probe run here decided, and the claim answered at its
    # first pass: created, probed once, nothing after. The probe is the body's own health check, run at once: Docker
    # was not asked for it, nor for the container's state or health before it (two inspects per creation before).
    # The runtime's own record, not a time a busy machine stretches.
    assert (od.backend.provisioner.probed, od.backend.provisioner.looked) == ([], [])
    assert [c for c in od.backend.calls[before:] if c[1] == PLACES[0]][-2:] == [("create", PLACES[0]), ("exec", PLACES[0])]
    od.backend.close()


def test_a_failing_probe_hands_back_nothing_and_the_claim_fails_at_its_wait(tmp_path):
    od = _env(tmp_path, ["CMD", "test", "-e", "service-up"], wait_seconds=1)
    od.claim("warm", pool="od")
    response = od.api.post("/v1/sessions", json={"pool": "od", "session": "new"})
    assert response.status_code == 503
    assert response.json()["error"] == (f"no capacity: a sandbox of pool 'od' on host 'local' could not be created "
                                        f"on demand: container '{PLACES[0]}' was not ready within 1s")
    # Run while Docker said 'starting', and its failure never taken for ready. (How many times it ran in the second
    # is the machine's speed; that a failed run is run again is the next test's.)
    assert ("exec", PLACES[0]) in od.backend.calls
    row = od.runtime.store.sandbox(PLACES[0])
    assert (row.status, row.session) == ("absent", None)
    od.backend.close()


def test_a_probe_that_failed_is_run_again_while_docker_says_starting(tmp_path):
    # Fails its first run (leaving 'tried' behind), passes the next: only a runtime that runs a failed probe again,
    # and does not take its failure for ready, hands the sandbox back, after exactly two runs. A generous wait:
    # nothing here depends on how fast the machine runs them.
    od = _env(tmp_path, ["CMD-SHELL", "test -e tried || { touch tried; exit 1; }"], wait_seconds=60)
    od.claim("warm", pool="od")
    answer = od.claim("new", pool="od")
    assert (answer["sandbox"], answer["status"]) == (PLACES[0], "bound")
    assert od.backend.provisioner.health_of[PLACES[0]] == "starting"
    assert len([c for c in od.backend.calls if c == ("exec", PLACES[0])]) == 2
    od.backend.close()


def test_a_resume_waits_for_the_probe_and_then_writes_the_files_back(tmp_path):
    od = _env(tmp_path, ["CMD", "test", "-e", "service-up"])
    sandbox = od.claim("a", pool="od")["sandbox"]
    assert sandbox == WARM
    # The probe passes and keeps a line per run (its working directory is the container's '/').
    od.backend.provisioner.warm_health[WARM] = {"Test": ["CMD-SHELL", "echo run >> probe-runs"],
                                                "Timeout": 1_000_000_000}
    od.backend.provisioner.health_of[WARM] = "starting"
    od.api.put(f"/v1/sandboxes/{WARM}/files/notes.txt", content=b"kept")
    assert od.api.post("/v1/sessions/a/hibernate").json()["status"] == "hibernated"
    before = len(od.backend.calls)
    resumed = od.api.post("/v1/sessions/a/resume")
    assert (resumed.status_code, resumed.json()["status"]) == (200, "bound")
    # Docker says 'starting' throughout: the probe decided, at its first run right after the start (then the files
    # were written back), not a later one; the runtime's record, not a time a busy machine stretches.
    assert od.backend.calls[before:before + 2] == [("start", WARM), ("exec", WARM)]
    assert od.backend.path(WARM, "/probe-runs").read_text() == "run\n"
    assert od.backend.provisioner.probed == [WARM]
    assert od.api.get(f"/v1/sandboxes/{WARM}/files/notes.txt").content == b"kept"
    od.backend.close()


def test_a_resume_whose_probe_fails_waits_for_docker_to_say_healthy(tmp_path):
    od = _env(tmp_path, ["CMD", "true"])
    od.claim("a", pool="od")
    od.backend.provisioner.warm_health[WARM] = {"Test": ["CMD", "false"], "Timeout": 1_000_000_000}
    od.backend.provisioner.health_of[WARM] = "starting"
    od.api.post("/v1/sessions/a/hibernate")
    timer = threading.Timer(0.6, lambda: od.backend.provisioner.health_of.__setitem__(WARM, "healthy"))
    timer.start()
    started = time.monotonic()
    resumed = od.api.post("/v1/sessions/a/resume")
    timer.join()
    assert (resumed.status_code, resumed.json()["status"]) == (200, "bound")
    assert time.monotonic() - started >= 0.6  # not before Docker's own check said so
    od.backend.close()
