"""Size classes at claim time over the fake backend (sandstack.runtime.sizes, docs/design/sizes.md): a claim of a
class resizes its warm sandbox before answering and its release gives the pool's limits back; a class the pool does
not declare is a 422 naming the classes that takes nothing; a class of another disk is served on demand only."""

from __future__ import annotations

import dataclasses

import pytest

from sandstack.plan.runtime import PoolRuntime, RuntimeConfig, SizeLimits, Sizes, WritablePath
from tests.runtime.ondemand_helpers import PLACES, WARM, od_config, od_env

MIB = 1024 * 1024
DEFAULT = SizeLimits(1.0, 256 * MIB, 512 * MIB, 64)
LARGE = SizeLimits(2.0, 1024 * MIB, 512 * MIB, 512)
WIDE = SizeLimits(1.0, 256 * MIB, 2048 * MIB, 64)  # another disk: on demand only
SIZES = Sizes(DEFAULT, {"large": LARGE, "wide": WIDE})
BODY = {"NanoCpus": 1_000_000_000, "Memory": 256 * MIB, "MemorySwap": 256 * MIB, "PidsLimit": 64}
LARGE_BODY = {"NanoCpus": 2_000_000_000, "Memory": 1024 * MIB, "MemorySwap": 1024 * MIB, "PidsLimit": 512}


def sized_config(*, ondemand: bool = True) -> RuntimeConfig:
    pool = od_config().pools["od"]
    pool = dataclasses.replace(pool, sizes=SIZES, ondemand=pool.ondemand if ondemand else None)
    return dataclasses.replace(od_config(), pools={"od": pool})


@pytest.fixture
def env(tmp_path):
    env = od_env(tmp_path, sized_config())
    yield env
    env.backend.close()
    env.audit.close()


def test_a_claim_of_a_class_resizes_the_warm_sandbox_and_its_release_restores_the_pools_limits(env):
    answer = env.claim("s1", pool="od", size="large")
    assert (answer["sandbox"], answer["size"]) == (WARM, "large")
    assert env.backend.limits[WARM] == LARGE_BODY
    assert env.api.get("/v1/sessions/s1").json()["size"] == "large"
    released = env.api.delete("/v1/sessions/s1")
    assert (released.status_code, released.json()["status"], released.json()["size"]) == (200, "idle", None)
    assert env.backend.limits[WARM] == BODY
    # Restored while stopped, before the reset's start: the session's processes never ran at the pool's limits.
    calls = [op for op, name in env.backend.calls if name == WARM]
    assert calls[calls.index("stop"):] == ["stop", "resize", "start"]


def test_a_claim_naming_no_class_gets_the_pools_own_limits_set(env):
    answer = env.claim("s1", pool="od")
    assert (answer["sandbox"], answer["size"]) == (WARM, None)
    assert env.backend.limits[WARM] == BODY  # a pids limit of its own, under the guard's largest


def test_an_unknown_class_is_422_naming_the_classes_and_takes_nothing(env):
    before = [(r.name, r.status, r.session) for r in env.runtime.store.sandboxes()]
    calls = len(env.backend.calls)
    response = env.api.post("/v1/sessions", json={"pool": "od", "session": "s1", "size": "huge"})
    assert response.status_code == 422
    assert response.json() == {"error": "pool 'od' has no size class 'huge': its classes are large, wide (or name "
                                        "none for the pool's own limits)", "pool": "od", "size": "huge",
                               "sizes": ["large", "wide"]}
    assert [(r.name, r.status, r.session) for r in env.runtime.store.sandboxes()] == before
    assert len(env.backend.calls) == calls and env.backend.provisioner.bodies == {} and env.backend.limits == {}


def test_a_class_named_on_a_pool_without_classes_is_422(tmp_path):
    env = od_env(tmp_path)
    try:
        response = env.api.post("/v1/sessions", json={"pool": "od", "session": "s1", "size": "large"})
        assert (response.status_code, response.json()["error"]) == (
            422, "pool 'od' declares no size classes, so a claim of it names none (size 'large' given); its "
                 "sandboxes have the pool's own limits")
        assert env.runtime.store.by_session("operator/s1") is None and env.runtime.store.sandbox(WARM).status == "idle"
    finally:
        env.backend.close()
        env.audit.close()


def test_a_class_of_another_disk_is_created_on_demand_with_the_class_limits(env):
    answer = env.claim("s1", pool="od", size="wide")
    assert (answer["sandbox"], answer["size"]) == (PLACES[0], "wide")  # the idle warm one is left idle
    assert env.runtime.store.sandbox(WARM).status == "idle"
    assert env.backend.provisioner.bodies[PLACES[0]]["HostConfig"] == {
        **BODY, "CgroupParent": f"sandstack/{PLACES[0]}"}
    assert WARM not in env.backend.limits
    released = env.api.delete("/v1/sessions/s1")
    assert (released.json()["status"], released.json()["size"]) == ("absent", None)


def test_an_on_demand_place_claimed_at_a_class_is_made_with_its_limits(env):
    env.claim("s0", pool="od")
    answer = env.claim("s1", pool="od", size="large")
    assert answer["sandbox"] == PLACES[0]
    assert env.backend.provisioner.bodies[PLACES[0]]["HostConfig"] == {
        **LARGE_BODY, "CgroupParent": f"sandstack/{PLACES[0]}"}


def test_the_same_session_at_another_size_is_409_and_keeps_its_sandbox(env):
    env.claim("s1", pool="od", size="large")
    again = env.api.post("/v1/sessions", json={"pool": "od", "session": "s1", "size": "large"})
    assert (again.status_code, again.json()["sandbox"]) == (200, WARM)
    other = env.api.post("/v1/sessions", json={"pool": "od", "session": "s1"})
    assert (other.status_code, other.json()["error"]) == (
        409, "session 's1' holds a sandbox of size class 'large', not the pool's own limits: release it to claim "
             "another size")
    assert env.backend.limits[WARM] == LARGE_BODY


def test_a_class_of_another_disk_without_on_demand_is_503_and_takes_nothing(tmp_path):
    env = od_env(tmp_path, sized_config(ondemand=False))
    try:
        response = env.api.post("/v1/sessions", json={"pool": "od", "session": "s1", "size": "wide"})
        assert (response.status_code, response.json()["error"]) == (
            503, "no capacity: size class 'wide' of pool 'od' has another disk than the pool's, which only a sandbox "
                 "created on demand can have, and the pool has no on-demand places on this host")
        assert env.runtime.store.sandbox(WARM).status == "idle" and env.backend.limits == {}
    finally:
        env.backend.close()
        env.audit.close()


def test_a_failed_resize_fails_the_claim_and_gives_the_sandbox_back(env):
    def refuse(name, update):
        from sandstack.runtime.backend import BackendError
        raise BackendError("Cannot update container: refused")

    env.backend.resize = refuse
    response = env.api.post("/v1/sessions", json={"pool": "od", "session": "s1", "size": "large"})
    assert (response.status_code, response.json()["error"]) == (502, "Cannot update container: refused")
    row = env.runtime.store.sandbox(WARM)
    assert (row.session, row.size) == (None, "large")  # its reset could not undo the class: quarantined, not idle
    assert row.status == "quarantined"


def test_a_state_volume_from_before_size_classes_gains_the_column(tmp_path):
    import sqlite3

    from sandstack.runtime.store import Store
    db = sqlite3.connect(tmp_path / "old.sqlite3")
    db.execute("CREATE TABLE sandboxes (name TEXT PRIMARY KEY, pool TEXT NOT NULL, status TEXT NOT NULL DEFAULT "
               "'idle', session TEXT UNIQUE, bound_at REAL, from_snapshot TEXT, paused_by TEXT, last_activity REAL, "
               "cpu_ns INTEGER, detail TEXT)")
    db.execute("INSERT INTO sandboxes (name, pool) VALUES ('a', 'od')")
    db.commit()
    db.close()
    store = Store(tmp_path / "old.sqlite3")
    assert (store.sandbox("a").status, store.sandbox("a").size) == ("idle", None)
    store.update("a", size="large")
    assert store.sandbox("a").size == "large"


def test_a_reload_that_removes_the_classes_still_restores_a_held_sandbox_at_its_release(env):
    env.claim("s1", pool="od", size="large")
    env.runtime.reconfigure(od_config(), "without-classes")  # the same pool, no classes any more
    assert env.backend.limits[WARM] == LARGE_BODY  # the session goes on at its class
    released = env.api.delete("/v1/sessions/s1")
    assert (released.status_code, released.json()["size"]) == (200, None)
    assert env.backend.limits[WARM] == BODY  # the pool's own limits recorded at its claim


def test_an_on_demand_place_hibernated_at_a_class_is_made_again_at_it(env):
    env.claim("s0", pool="od")
    place = env.claim("s1", pool="od", size="large")["sandbox"]
    assert env.api.post("/v1/sessions/s1/hibernate").json()["status"] == "hibernated"
    assert place not in env.backend.provisioner.bodies  # its container removed
    resumed = env.api.post("/v1/sessions/s1/resume").json()
    assert (resumed["status"], resumed["size"]) == ("bound", "large")
    assert env.backend.provisioner.bodies[place]["HostConfig"] == {**LARGE_BODY, "CgroupParent": f"sandstack/{place}"}


def _resizes(env) -> int:
    return sum(1 for op, name in env.backend.calls if (op, name) == ("resize", WARM))


def test_limits_the_runtime_set_on_the_same_container_are_not_set_again(env):
    env.claim("s1", pool="od")  # a container Pulumi made: its own limits set once (its pids)
    env.api.delete("/v1/sessions/s1")
    assert _resizes(env) == 1
    env.claim("s2", pool="od")  # the same container, at the pool's own limits already: no Docker call
    env.api.delete("/v1/sessions/s2")
    assert _resizes(env) == 1
    env.claim("s3", pool="od", size="large")
    env.api.delete("/v1/sessions/s3")  # resized, then restored by its reset
    assert (_resizes(env), env.backend.limits[WARM]) == (3, BODY)
    env.claim("s4", pool="od")  # restored by the runtime on this container: nothing to do
    env.api.delete("/v1/sessions/s4")
    assert _resizes(env) == 3
    env.backend.recreate(WARM)  # an apply made a new container in its name: its limits are set again
    env.claim("s5", pool="od")
    assert (_resizes(env), env.backend.limits[WARM]) == (4, BODY)


def test_the_pools_listing_names_each_class_a_claim_may_ask_for(env, tmp_path):
    [pool] = env.api.get("/v1/pools").json()
    assert pool["sizes"] == {"large": {"cpus": 2.0, "memory": 1024 * MIB, "disk": 512 * MIB, "pids": 512},
                             "wide": {"cpus": 1.0, "memory": 256 * MIB, "disk": 2048 * MIB, "pids": 64}}
    plain = od_env(tmp_path / "plain", od_config())
    try:
        assert [p["sizes"] for p in plain.api.get("/v1/pools").json()] == [{}]  # a pool without classes
    finally:
        plain.backend.close()
        plain.audit.close()
