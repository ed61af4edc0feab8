"""Snapshots of the writable paths: restore, branch, retention."""

from __future__ import annotations

import time

import pytest
from tests.runtime.conftest import hk


@pytest.fixture
def sandbox(env) -> str:
    return env.claim("chat-1")["sandbox"]


def put(env, sandbox, path, data):
    assert env.api.put(f"/v1/sandboxes/{sandbox}/files/{path}", content=data).status_code == 204


def get(env, sandbox, path):
    return env.api.get(f"/v1/sandboxes/{sandbox}/files/{path}")


def test_restore_brings_the_files_back_as_they_were(env, sandbox):
    put(env, sandbox, "a.txt", b"v1")
    (env.backend.path(sandbox, "/tmp") / "cache").write_bytes(b"tmp-v1")
    snap = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots")
    assert snap.status_code == 201
    info = snap.json()
    assert (info["pool"], info["sandbox"], info["session"], info["paths"]) == ("py", sandbox, "chat-1",
                                                                               ["/workspace", "/tmp"])
    assert info["size"] == sum(f.stat().st_size for f in (env.state_dir / "snapshots" / info["id"]).iterdir())
    put(env, sandbox, "a.txt", b"v2")
    put(env, sandbox, "new.txt", b"added later")
    restored = env.api.post(f"/v1/sandboxes/{sandbox}/restore", json={"snapshot": info["id"]})
    assert (restored.status_code, restored.json()["id"]) == (200, info["id"])
    assert get(env, sandbox, "a.txt").content == b"v1"
    assert get(env, sandbox, "new.txt").status_code == 404
    assert (env.backend.path(sandbox, "/tmp") / "cache").read_bytes() == b"tmp-v1"


def test_branch_starts_a_new_session_on_its_own_sandbox_from_a_snapshot(env, sandbox):
    put(env, sandbox, "work.txt", b"shared start")
    snap = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots").json()["id"]
    branch = env.claim("chat-1-branch", from_snapshot=snap)
    assert branch["sandbox"] != sandbox
    assert branch["from_snapshot"] == snap
    assert get(env, branch["sandbox"], "work.txt").content == b"shared start"
    put(env, branch["sandbox"], "work.txt", b"branch only")
    assert get(env, sandbox, "work.txt").content == b"shared start"


def test_branching_from_another_pools_or_an_unknown_snapshot_fails_without_binding(env, sandbox):
    snap = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots").json()["id"]
    other = env.api.post("/v1/sessions", json={"pool": "web", "session": "b", "from_snapshot": snap})
    assert (other.status_code, other.json()["error"]) == (409, f"snapshot {snap!r} is of pool 'py', not 'web'")
    unknown = env.api.post("/v1/sessions", json={"pool": "py", "session": "b", "from_snapshot": "snap-" + "0" * 32})
    assert (unknown.status_code, unknown.json()["error"]) == (
        404, f"snapshot 'snap-{'0' * 32}' is not on host 'local'")
    assert env.runtime.store.by_session(hk("b")) is None


def test_retention_keeps_the_newest_count_per_pool_and_drops_old_ones(env, sandbox):
    ids = [env.api.post(f"/v1/sandboxes/{sandbox}/snapshots").json()["id"] for _ in range(3)]
    listed = [s["id"] for s in env.api.get("/v1/snapshots", params={"pool": "py"}).json()]
    assert sorted(listed) == sorted(ids[1:])
    assert not (env.state_dir / "snapshots" / ids[0]).exists()
    removed = env.runtime.snapshots.apply_retention(time.time() + 3601)
    assert sorted(removed) == sorted(ids[1:])
    assert env.api.get("/v1/snapshots").json() == []


def test_deleting_a_snapshot_removes_its_files(env, sandbox):
    snap = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots").json()["id"]
    assert env.api.delete(f"/v1/snapshots/{snap}").status_code == 204
    assert env.api.get(f"/v1/snapshots/{snap}").status_code == 404
    assert not (env.state_dir / "snapshots" / snap).exists()
