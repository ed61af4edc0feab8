"""On-demand sandboxes and hibernation in the runtime, over the fake backend (docs/design/ondemand.md)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.runtime.ondemand_helpers import PLACES, WARM, FakeProvisioner, od_config, od_env, recipe
from sandstack.plan.recipe import LABEL_ONDEMAND
from sandstack.plan.runtime import IdlePolicy, RuntimeConfig
from tests.runtime.conftest import hk


@pytest.fixture
def od(tmp_path):
    env = od_env(tmp_path)
    yield env
    env.backend.close()
    env.audit.close()


def test_a_claim_past_the_warm_sandbox_creates_one_from_its_slots_recipe(od):
    assert od.claim("s-warm", pool="od")["sandbox"] == WARM
    answer = od.claim("s-new", pool="od")
    assert (answer["sandbox"], answer["status"]) == (PLACES[0], "bound")
    assert od.backend.provisioner.bodies[PLACES[0]] == recipe().body(PLACES[0])
    assert od.backend.provisioner.bodies[PLACES[0]]["HostConfig"] == {
        "Memory": 268435456, "NanoCpus": 1000000000, "CgroupParent": f"sandstack/{PLACES[0]}"}
    # The same session again: the same sandbox, nothing created.
    again = od.api.post("/v1/sessions", json={"pool": "od", "session": "s-new"})
    assert (again.status_code, again.json()["sandbox"]) == (200, PLACES[0])
    assert [c for c in od.backend.calls if c[0] == "create"] == [("create", PLACES[0])]


def test_a_claim_past_the_ceiling_is_503_naming_pool_host_and_ceiling_and_changes_nothing(od):
    for session in ("a", "b", "c"):
        od.claim(session, pool="od")
    before = [(r.name, r.status, r.session) for r in od.runtime.store.sandboxes()]
    response = od.api.post("/v1/sessions", json={"pool": "od", "session": "d"})
    assert response.status_code == 503
    assert response.json() == {
        "error": "no capacity: pool 'od' on host 'local' is at its ceiling of 3 sandboxes (1 warm, 2 on demand), "
                 "none idle", "pool": "od", "host": "local", "ceiling": 3}
    assert [(r.name, r.status, r.session) for r in od.runtime.store.sandboxes()] == before


def test_an_unknown_pool_is_404_and_creates_nothing(od):
    response = od.api.post("/v1/sessions", json={"pool": "nope", "session": "x"})
    assert (response.status_code, response.json()["error"]) == (404, "pool 'nope' is not on host 'local'")
    assert od.backend.provisioner.bodies == {}


def test_a_release_retires_the_on_demand_sandbox_and_frees_its_slot(od):
    od.claim("a", pool="od")
    od.claim("b", pool="od")
    od.api.put(f"/v1/sandboxes/{PLACES[0]}/files/left.txt", content=b"of b")
    released = od.api.delete("/v1/sessions/b")
    assert (released.status_code, released.json()["status"], released.json()["container"]) == (200, "absent",
                                                                                                "missing")
    assert PLACES[0] not in od.backend.provisioner.bodies
    # The warm one stays, idle, after its release.
    assert od.api.delete("/v1/sessions/a").json()["status"] == "idle"
    # The place is made again for the next claim past the warm one, with nothing of b's.
    od.claim("c", pool="od")
    answer = od.claim("d", pool="od")
    assert answer["sandbox"] == PLACES[0]
    assert od.api.get(f"/v1/sandboxes/{PLACES[0]}/files/left.txt").status_code == 404


def test_a_failed_creation_is_503_and_leaves_the_slot_absent(od):
    od.claim("a", pool="od")
    od.backend.provisioner.health_of[PLACES[0]] = "unhealthy"
    response = od.api.post("/v1/sessions", json={"pool": "od", "session": "b"})
    assert response.status_code == 503
    assert response.json()["error"] == (f"no capacity: a sandbox of pool 'od' on host 'local' could not be created "
                                        f"on demand: container '{PLACES[0]}' is running (unhealthy)")
    row = od.runtime.store.sandbox(PLACES[0])
    assert (row.status, row.session, od.backend.status[PLACES[0]]) == ("absent", None, "missing")


def test_a_restarted_runtime_keeps_bound_on_demand_sandboxes_and_reconciles_the_rest(od):
    od.claim("a", pool="od")
    od.claim("b", pool="od")
    od.claim("c", pool="od")
    od.api.put(f"/v1/sandboxes/{PLACES[0]}/files/kept.txt", content=b"kept")
    od.backend.remove(PLACES[1])  # gone while the runtime was down
    restarted = od.restarted()
    assert restarted.api.get("/v1/sessions/b").json()["sandbox"] == PLACES[0]
    assert restarted.api.get(f"/v1/sandboxes/{PLACES[0]}/files/kept.txt").content == b"kept"
    assert restarted.api.get("/v1/sessions/c").status_code == 404
    row = restarted.runtime.store.sandbox(PLACES[1])
    assert (row.status, row.detail) == ("absent", "its container was gone, or not yet ready, when the runtime "
                                                  "started; session 'c' has ended")


def test_a_changed_pool_removes_idle_old_containers_and_keeps_bound_ones_until_release(tmp_path):
    env = od_env(tmp_path)
    env.claim("a", pool="od")
    env.claim("b", pool="od")
    # A container of an older recipe, bound to no session (left by a runtime that stopped mid-release).
    env.backend.provisioner.create(PLACES[1], recipe("old").body(PLACES[1]))
    env.backend.provisioner.bodies[PLACES[0]] = recipe("old").body(PLACES[0])
    changed = od_env(tmp_path, config=od_config(digest="r2"), backend=env.backend)
    assert env.backend.status[PLACES[1]] == "missing"
    assert env.backend.status[PLACES[0]] == "running"  # still session b's
    assert changed.api.delete("/v1/sessions/b").json()["status"] == "absent"
    assert env.backend.status[PLACES[0]] == "missing"
    env.backend.close()


def test_a_configuration_without_its_labels_removes_no_other_stack_s_on_demand_container(tmp_path):
    # A runtime started by hand with a configuration the plan did not make (no stack or host label) once removed
    # every on-demand container on the daemon as "no longer declared": another stack's included.
    env = od_env(tmp_path)
    foreign = "sandstack-other-od-1"
    env.backend.provisioner.create(foreign, {**recipe("theirs").body(PLACES[0]),
                                             "Labels": {"sandstack.stack": "other", "sandstack.host": "local",
                                                        "sandstack.pool": "od", LABEL_ONDEMAND: "true"}})
    env.backend.provisioner.create(PLACES[1], recipe("old").body(PLACES[1]))  # its own place, of an older recipe
    bare = RuntimeConfig(host="local", pools=od_config(digest="r2").pools)  # ondemand_labels: none
    od_env(tmp_path, config=bare, backend=env.backend)
    assert env.backend.status[foreign] == "running"
    assert env.backend.status[PLACES[1]] == "missing"  # its own, by name: reconciled as before
    env.backend.close()


def test_hibernate_stops_the_sandbox_keeps_its_files_and_the_next_call_resumes_it(od):
    od.claim("a", pool="od")
    sandbox = od.claim("b", pool="od")["sandbox"]
    od.api.put(f"/v1/sandboxes/{sandbox}/files/notes.txt", content=b"mine")
    hibernated = od.api.post("/v1/sessions/b/hibernate")
    # An on-demand sandbox's container is removed (made again at resume); a warm one's is stopped.
    assert (hibernated.status_code, hibernated.json()["status"], hibernated.json()["container"]) == (
        200, "hibernated", "missing")
    warm = od.api.post("/v1/sessions/a/hibernate").json()
    assert (warm["sandbox"], warm["status"], warm["container"]) == (WARM, "hibernated", "exited")
    assert od.backend.cpu_usage_ns(WARM) is None  # not running: no CPU, no memory
    # The next call for the session brings it back, files and all.
    answer = od.api.post(f"/v1/sandboxes/{sandbox}/exec", json={"command": ["cat", "notes.txt"]})
    assert (answer.status_code, answer.json()["stdout"]) == (200, "mine")
    assert od.api.get("/v1/sessions/b").json()["status"] == "bound"


def test_resume_by_session_and_after_a_restart_of_the_runtime(od):
    sandbox = od.claim("a", pool="od")["sandbox"]
    od.api.put(f"/v1/sandboxes/{sandbox}/files/notes.txt", content=b"before")
    od.api.post("/v1/sessions/a/hibernate")
    restarted = od.restarted()
    assert restarted.api.get("/v1/sessions/a").json()["status"] == "hibernated"
    resumed = restarted.api.post("/v1/sessions/a/resume")
    assert (resumed.status_code, resumed.json()["status"]) == (200, "bound")
    assert restarted.api.get(f"/v1/sandboxes/{sandbox}/files/notes.txt").content == b"before"


def test_resume_or_hibernate_of_a_released_session_is_404_and_changes_nothing(od):
    od.claim("a", pool="od")
    od.api.delete("/v1/sessions/a")
    before = [(r.name, r.status, r.session) for r in od.runtime.store.sandboxes()]
    for action in ("resume", "hibernate"):
        response = od.api.post(f"/v1/sessions/a/{action}")
        assert (response.status_code, response.json()["error"]) == (404, "session 'a' is not on host 'local'")
    assert [(r.name, r.status, r.session) for r in od.runtime.store.sandboxes()] == before


def test_the_idle_action_hibernate(tmp_path):
    env = od_env(tmp_path, config=od_config(idle=IdlePolicy("hibernate", 30)))
    sandbox = env.claim("a", pool="od")["sandbox"]
    env.api.put(f"/v1/sandboxes/{sandbox}/files/notes.txt", content=b"idle")
    row = env.runtime.store.sandbox(sandbox)
    env.runtime.monitor_once(now=row.last_activity + 1)  # a first CPU sample
    env.runtime.monitor_once(now=row.last_activity + 31)
    assert (env.runtime.store.sandbox(sandbox).status, env.backend.status[sandbox]) == ("hibernated", "exited")
    assert env.api.get(f"/v1/sandboxes/{sandbox}/files/notes.txt").content == b"idle"
    env.backend.close()
    env.audit.close()


def test_an_explicit_hibernate_of_a_session_the_idle_policy_hibernated_answers_as_the_apis(tmp_path):
    """The API's hibernate of a sandbox the monitor hibernated a moment before was answered `paused_by: idle`,
    with `idle_seconds` below zero (the pass's time is after the answer's): it is the API's request now, and no
    sandbox has been idle for less than no time."""
    env = od_env(tmp_path, config=od_config(idle=IdlePolicy("hibernate", 30)))
    sandbox = env.claim("a", pool="od")["sandbox"]
    row = env.runtime.store.sandbox(sandbox)
    env.runtime.monitor_once(now=row.last_activity + 31)  # a first CPU sample: activity, written as the pass's time
    env.runtime.monitor_once(now=row.last_activity + 62)
    assert env.runtime.store.sandbox(sandbox).paused_by == "idle"
    answer = env.api.post("/v1/sessions/a/hibernate").json()
    assert (answer["status"], answer["paused_by"], answer["idle_seconds"]) == ("hibernated", "api", 0.0)
    assert env.api.get("/v1/sessions/a").json()["paused_by"] == "api"
    env.backend.close()
    env.audit.close()


def test_a_second_hibernate_while_one_is_under_way_is_409(od):
    sandbox = od.claim("a", pool="od")["sandbox"]
    with od.runtime.leases.pause(sandbox):  # a pause or hibernation under way (it read the row as bound)
        response = od.api.post("/v1/sessions/a/hibernate")
    assert (response.status_code, response.json()["error"]) == (
        409, f"sandbox {sandbox!r} is being paused or hibernated already; try again when that has answered")
    assert od.runtime.store.sandbox(sandbox).status == "bound"


@pytest.mark.parametrize("docker_status", ["restarting", "exited", "running"])
def test_an_on_demand_sandbox_ended_at_its_lifetime_while_bound_is_reported_so_not_as_a_restart(tmp_path,
                                                                                             docker_status):
    """The guard ends a sandbox at its max lifetime (exit 124); Docker's restart policy runs it again (its supervisor
    ends each retry at once). That was reported "container restarted while bound", for an on-demand place too."""
    config = dataclasses.replace(od_config(), exit_lifetime=124, exit_idle=123)
    env = od_env(tmp_path, config=config)
    env.claim("a", pool="od")
    sandbox = env.claim("b", pool="od")["sandbox"]
    env.runtime.monitor_once()  # its run, as the monitor first sees it
    env.backend.die(sandbox, 124)  # Docker's `die` event says 124
    env.backend.status[sandbox] = docker_status
    env.backend.exit_codes[sandbox] = None if docker_status == "running" else 124  # a run started again reads 0
    env.backend.starts[sandbox] += 1  # a retry by its restart policy: another StartedAt
    env.runtime.monitor_once()
    why = "its max lifetime was reached (exit 124) while bound to session 'b': the host guard ended it, and the " \
          "session with it"
    assert (env.runtime.store.sandbox(sandbox).status, env.runtime.store.sandbox(sandbox).detail) == ("unhealthy", why)
    env.runtime.monitor_once()  # retired, as any broken place: the reason stays
    row = env.runtime.store.sandbox(sandbox)
    assert (row.status, row.session, row.detail) == ("absent", None, why)
    env.backend.close()
    env.audit.close()


def test_an_idle_on_demand_sandbox_is_retired_by_the_monitor(tmp_path):
    env = od_env(tmp_path, config=od_config(idle=IdlePolicy("reset", 30)))
    env.claim("a", pool="od")
    sandbox = env.claim("b", pool="od")["sandbox"]
    row = env.runtime.store.sandbox(sandbox)
    env.runtime.monitor_once(now=row.last_activity + 1)
    env.runtime.monitor_once(now=row.last_activity + 31)
    assert (env.runtime.store.sandbox(sandbox).status, env.backend.status[sandbox]) == ("absent", "missing")
    assert env.runtime.store.sandbox(WARM).status == "idle"  # the warm one: reset into the pool
    env.backend.close()
    env.audit.close()


def test_a_stopping_runtime_hibernates_bound_on_demand_sandboxes_and_the_next_call_makes_them_again(od):
    od.claim("a", pool="od")
    sandbox = od.claim("b", pool="od")["sandbox"]
    od.api.put(f"/v1/sandboxes/{sandbox}/files/notes.txt", content=b"across")
    od.runtime.shutdown()
    assert od.backend.status[sandbox] == "missing"  # nothing left to hold the stack's networks or volumes
    assert od.backend.status[WARM] == "running"  # a warm sandbox is the stack's: left as it is
    row = od.runtime.store.sandbox(sandbox)
    assert (row.status, row.session, row.paused_by) == ("hibernated", hk("b"), "shutdown")
    restarted = od.restarted()
    answer = restarted.api.post(f"/v1/sandboxes/{sandbox}/exec", json={"command": ["cat", "notes.txt"]})
    assert (answer.status_code, answer.json().get("stdout")) == (200, "across"), answer.json()
    assert [c for c in od.backend.calls if c == ("create", sandbox)] == [("create", sandbox)] * 2


def test_the_monitor_takes_a_resumed_or_recreated_sandbox_for_the_sessions_own(od):
    # Its container starts anew (a new StartedAt): not a restart that wiped the session, as the monitor would read
    # a change of StartedAt while bound.
    od.claim("a", pool="od")
    sandbox = od.claim("b", pool="od")["sandbox"]
    od.runtime.monitor_once()
    od.api.post("/v1/sessions/a/hibernate")
    od.api.post("/v1/sessions/b/hibernate")
    od.api.post("/v1/sessions/a/resume")
    od.api.post("/v1/sessions/b/resume")
    od.runtime.monitor_once()
    assert [(r.name, r.status, r.session) for r in od.runtime.store.sandboxes()] == [
        (WARM, "bound", hk("a")), (sandbox, "bound", hk("b")), (PLACES[1], "absent", None)]
    od.api.delete("/v1/sessions/b")
    assert od.claim("c", pool="od")["sandbox"] == sandbox
    od.runtime.monitor_once()
    assert od.runtime.store.sandbox(sandbox).status == "bound"
