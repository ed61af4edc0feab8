"""A pool that counts its hibernated sessions apart (`max_hibernated`; sandstack.runtime.ceilings), over the fake
backend: pool 'od' with 1 warm sandbox, a running ceiling of 2 (`max`) and room for 2 hibernated sessions, so 3
on-demand places (docs/design/ondemand.md, "Hibernated sessions, counted apart")."""

from __future__ import annotations

import dataclasses

import pytest

from sandstack.plan.recipe import OnDemand
from sandstack.plan.runtime import PoolRuntime, RuntimeConfig, WritablePath
from tests.runtime.ondemand_helpers import COMMON, OWNED, WARM, od_env

PLACES = ("sandstack-t-od-1", "sandstack-t-od-2", "sandstack-t-od-3")


def config(hibernated: int | None = 2, ceiling: int = 2) -> RuntimeConfig:
    places = PLACES[:ceiling - 1 + (hibernated or 0)]
    ondemand = OnDemand(ceiling=ceiling, common=COMMON, wait_seconds=5, hibernated=hibernated,
                        places={name: {"Hostname": name} for name in places})
    writable = (WritablePath("/workspace"), WritablePath("/tmp"))
    return RuntimeConfig(host="local", pools={"od": PoolRuntime((WARM,), "/workspace", writable, ondemand=ondemand)},
                         ondemand_labels=OWNED)


@pytest.fixture
def env(tmp_path):
    env = od_env(tmp_path, config())
    yield env
    env.close()


def statuses(env) -> dict[str, tuple[str, str | None]]:
    return {row.name: (row.status, row.session) for row in env.runtime.store.sandboxes()}


AT_CEILING = {"error": "no capacity: pool 'od' on host 'local' runs its ceiling of 2 sandboxes (max: 1 warm, the "
                       "rest on demand), none idle; its 1 hibernated sessions hold no memory and are not counted "
                       "(max_hibernated 2)",
              "pool": "od", "host": "local", "ceiling": 2, "running": 2, "hibernated": 1, "max_hibernated": 2}


def test_a_hibernated_session_leaves_room_under_max_and_the_claim_that_fits_is_accepted(env):
    env.claim("a", pool="od")  # the warm one
    assert env.claim("b", pool="od")["sandbox"] == PLACES[0]
    refused = env.api.post("/v1/sessions", json={"pool": "od", "session": "c"})
    assert (refused.status_code, refused.json()) == (503, {**AT_CEILING, "error": AT_CEILING["error"].replace(
        "its 1 hibernated", "its 0 hibernated"), "hibernated": 0})
    assert env.api.post("/v1/sessions/b/hibernate").json()["status"] == "hibernated"
    # b holds no memory now: c runs in the next place, and the ceiling of 2 running is reached again.
    accepted = env.api.post("/v1/sessions", json={"pool": "od", "session": "c"})
    assert (accepted.status_code, accepted.json()["sandbox"]) == (201, PLACES[1])
    before = statuses(env)
    refused = env.api.post("/v1/sessions", json={"pool": "od", "session": "d"})
    assert (refused.status_code, refused.json()) == (503, AT_CEILING)
    assert statuses(env) == before
    assert [c for c in env.backend.calls if c[0] == "create"] == [("create", PLACES[0]), ("create", PLACES[1])]


def test_a_branch_at_the_running_ceiling_is_refused_and_fits_once_a_session_hibernates(env):
    env.claim("a", pool="od")
    env.claim("b", pool="od")
    snapshot = env.api.post(f"/v1/sandboxes/{PLACES[0]}/snapshots").json()["id"]
    refused = env.api.post("/v1/sessions", json={"pool": "od", "session": "c", "from_snapshot": snapshot})
    assert (refused.status_code, refused.json()["error"]) == (503, AT_CEILING["error"].replace(
        "its 1 hibernated", "its 0 hibernated"))
    env.api.post("/v1/sessions/a/hibernate")  # the warm one: it keeps its room under max (see the module)
    assert env.api.post("/v1/sessions", json={"pool": "od", "session": "c", "from_snapshot": snapshot}
                        ).status_code == 503
    env.api.post("/v1/sessions/b/hibernate")
    branched = env.api.post("/v1/sessions", json={"pool": "od", "session": "c", "from_snapshot": snapshot})
    assert (branched.status_code, branched.json()["sandbox"]) == (201, PLACES[1])


def test_a_resume_past_the_running_ceiling_is_409_and_it_stays_hibernated(env):
    env.claim("a", pool="od")
    env.claim("b", pool="od")
    env.api.put(f"/v1/sandboxes/{PLACES[0]}/files/notes.txt", content=b"of b")
    env.api.post("/v1/sessions/b/hibernate")
    env.claim("c", pool="od")
    before = statuses(env)
    for call in (lambda: env.api.post("/v1/sessions/b/resume"),
                 lambda: env.api.get(f"/v1/sandboxes/{PLACES[0]}/files/notes.txt")):  # any call resumes
        response = call()
        assert (response.status_code, response.json()) == (409, {
            "error": f"resuming sandbox '{PLACES[0]}': pool 'od' on host 'local' runs its ceiling of 2 sandboxes "
                     "(max), so it would pass it; it stays hibernated with its files (release or hibernate another "
                     "session of the pool, then resume)",
            "sandbox": PLACES[0], "pool": "od", "host": "local", "ceiling": 2, "status": "hibernated"})
    assert statuses(env) == before
    assert env.backend.status[PLACES[0]] == "missing"
    # c released: room again, and b comes back with its files.
    env.api.delete("/v1/sessions/c")
    assert env.api.post("/v1/sessions/b/resume").json()["status"] == "bound"
    assert env.api.get(f"/v1/sandboxes/{PLACES[0]}/files/notes.txt").content == b"of b"


def test_a_hibernation_past_max_hibernated_is_409_and_stops_nothing(tmp_path):
    env = od_env(tmp_path, config(hibernated=1))
    try:
        env.claim("a", pool="od")
        env.claim("b", pool="od")
        env.api.post("/v1/sessions/b/hibernate")
        env.claim("c", pool="od")
        before = statuses(env)
        refused = env.api.post("/v1/sessions/c/hibernate")
        assert (refused.status_code, refused.json()) == (409, {
            "error": f"hibernating sandbox '{PLACES[1]}': pool 'od' on host 'local' holds 1 hibernated sessions, its "
                     "ceiling (max_hibernated 1); it was not hibernated (release or resume one of them first)",
            "sandbox": PLACES[1], "pool": "od", "host": "local", "max_hibernated": 1})
        assert statuses(env) == before
        assert env.backend.status[PLACES[1]] == "running"
        assert not any(env.runtime.copies.path(PLACES[1]).glob("*"))
        # The warm sandbox is not one of the places counted: its hibernation is not bounded by max_hibernated.
        assert env.api.post("/v1/sessions/a/hibernate").json()["status"] == "hibernated"
        # The runtime's own stop keeps every session's files whatever the count.
        env.runtime.shutdown()
        assert statuses(env)[PLACES[1]] == ("hibernated", env.runtime.store.sandbox(PLACES[1]).session)
    finally:
        env.close()


def test_without_max_hibernated_a_hibernated_session_still_holds_its_place_under_max(tmp_path):
    env = od_env(tmp_path, config(hibernated=None, ceiling=3))
    try:
        for session in ("a", "b", "c"):
            env.claim(session, pool="od")
        env.api.post("/v1/sessions/c/hibernate")
        refused = env.api.post("/v1/sessions", json={"pool": "od", "session": "d"})
        assert (refused.status_code, refused.json()) == (503, {
            "error": "no capacity: pool 'od' on host 'local' is at its ceiling of 3 sandboxes (1 warm, 2 on demand), "
                     "none idle", "pool": "od", "host": "local", "ceiling": 3})
        # Nor is a resume ever refused for room there: its place is its own.
        assert env.api.post("/v1/sessions/c/resume").json()["status"] == "bound"
    finally:
        env.close()


def test_the_configuration_carries_the_ceiling_only_when_declared():
    assert "hibernated" not in config(hibernated=None, ceiling=3).to_json()
    again = RuntimeConfig.from_json(config().to_json())
    assert again.pools["od"].ondemand == dataclasses.replace(config().pools["od"].ondemand)
    assert again.pools["od"].ondemand.hibernated == 2
    with pytest.raises(ValueError, match=r"ondemand.hibernated: -1 must be an integer >= 0"):
        OnDemand(ceiling=2, common=COMMON, places={PLACES[0]: {}}, hibernated=-1)


def test_the_idle_policy_past_max_hibernated_leaves_the_sandbox_running_and_bound(tmp_path):
    from sandstack.plan.runtime import IdlePolicy

    base = config(hibernated=1)
    pool = dataclasses.replace(base.pools["od"], idle=IdlePolicy("hibernate", 30))
    env = od_env(tmp_path, dataclasses.replace(base, pools={"od": pool}))
    try:
        env.claim("a", pool="od")
        env.claim("b", pool="od")
        env.api.post("/v1/sessions/b/hibernate")
        env.claim("c", pool="od")
        row = env.runtime.store.sandbox(PLACES[1])
        env.runtime.monitor_once(now=row.last_activity + 1)  # a first CPU sample
        env.runtime.monitor_once(now=row.last_activity + 31)
        assert (env.runtime.store.sandbox(PLACES[1]).status, env.backend.status[PLACES[1]]) == ("bound", "running")
        # The warm one is not counted by max_hibernated: the same pass hibernated it.
        assert env.runtime.store.sandbox(WARM).status == "hibernated"
    finally:
        env.close()
