"""Snapshots kept per session (`session.session_snapshots`, `session_snapshot_max_age`), within the pool's bound."""

from __future__ import annotations

from dataclasses import replace

from sandstack.plan.runtime import Retention
from tests.runtime.conftest import make_config, make_env


def per_session_env(tmp_path, count: int = 2, max_age: int = 3600):
    config = make_config()
    pools = dict(config.pools)
    pools["py"] = replace(pools["py"], retention=Retention(count=10, max_age_seconds=7 * 86400),
                          session_retention=Retention(count=count, max_age_seconds=max_age))
    return make_env(tmp_path, replace(config, pools=pools))


def snap(env, sandbox) -> str:
    response = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots")
    assert response.status_code == 201, response.text
    return response.json()["id"]


def test_each_session_keeps_its_own_newest_snapshots(tmp_path):
    env = per_session_env(tmp_path, count=2)
    try:
        a, b = env.claim("chat-a")["sandbox"], env.claim("chat-b")["sandbox"]
        a_snaps = [snap(env, a) for _ in range(3)]
        b_snaps = [snap(env, b) for _ in range(2)]
        kept = {s["id"] for s in env.api.get("/v1/snapshots", params={"pool": "py"}).json()}
        # chat-a's oldest went; chat-b's two stay although the pool holds five in all (its bound is 10).
        assert kept == {*a_snaps[1:], *b_snaps}
        assert not (env.state_dir / "snapshots" / a_snaps[0]).exists()
        assert env.api.get(f"/v1/snapshots/{a_snaps[0]}").status_code == 404
    finally:
        env.backend.close()
        env.audit.close()


def test_a_sessions_snapshots_past_their_age_go_even_after_the_session_ended(tmp_path):
    env = per_session_env(tmp_path, count=5, max_age=60)
    try:
        a = env.claim("chat-a")["sandbox"]
        old = snap(env, a)
        assert env.api.delete("/v1/sessions/chat-a").status_code == 200
        fresh = snap(env, env.claim("chat-b")["sandbox"])
        removed = env.runtime.snapshots.apply_retention(env.runtime.store.snapshot(old).created_at + 61)
        assert sorted(removed) == sorted([old, fresh])  # both older than 60 s at that time
        assert env.runtime.store.snapshots() == []
        assert not (env.state_dir / "snapshots" / old).exists()
    finally:
        env.backend.close()
        env.audit.close()


def test_without_a_per_session_bound_only_the_pools_applies(env):
    a = env.claim("chat-a")["sandbox"]
    ids = [snap(env, a) for _ in range(3)]
    # The conftest pool keeps 2 in all (retention count 2), whichever session took them.
    assert [s["id"] for s in env.api.get("/v1/snapshots").json()] == ids[:0:-1]


def test_a_sandbox_restores_only_its_own_sessions_snapshots_and_another_is_409_changing_nothing(env):
    a, b = env.claim("chat-a")["sandbox"], env.claim("chat-b")["sandbox"]
    assert env.api.put(f"/v1/sandboxes/{a}/files/a.txt", content=b"of a").status_code == 204
    assert env.api.put(f"/v1/sandboxes/{b}/files/b.txt", content=b"of b").status_code == 204
    of_a = snap(env, a)
    response = env.api.post(f"/v1/sandboxes/{b}/restore", json={"snapshot": of_a})
    assert (response.status_code, response.json()) == (409, {
        "error": f"snapshot {of_a!r} is of session 'chat-a', not 'chat-b': start a session from it instead "
                 "(POST /v1/sessions with from_snapshot)", "snapshot": of_a, "session": "chat-b"})
    assert env.api.get(f"/v1/sandboxes/{b}/files/b.txt").content == b"of b"
    assert env.api.get(f"/v1/sandboxes/{b}/files/a.txt").status_code == 404
    # Its own session's snapshot restores, and a branch from another's is the way to start from it.
    assert env.api.post(f"/v1/sandboxes/{a}/restore", json={"snapshot": of_a}).status_code == 200
    branch = env.claim("chat-c", from_snapshot=of_a)["sandbox"]
    assert env.api.get(f"/v1/sandboxes/{branch}/files/a.txt").content == b"of a"
