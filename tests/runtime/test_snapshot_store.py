"""Snapshots that travel between hosts (docs/design/snapshot-store.md): hosts `a` and `b` of pool `py`, each a
runtime over its own fake backend and state, both keeping snapshots in one fake store (tests/runtime/fake_store.py)."""

from __future__ import annotations

import dataclasses
import io
import tarfile

import pytest
from fastapi.testclient import TestClient

from sandstack.plan.runtime import Retention, SnapshotStore
from sandstack.runtime.app import create_app
from sandstack.runtime.audit import AuditLog
from sandstack.runtime.service import Runtime
from tests.runtime.conftest import PY, TOKEN, WEB, Env, hk, make_config
from tests.runtime.fake_backend import FakeBackend
from tests.runtime.fake_store import DOWN, FakeStore

STORE = SnapshotStore("http://store.test", "sandstack/t", "snapshots")


def host_env(tmp_path, host: str, store: FakeStore, **pool_changes) -> Env:
    config = make_config()
    pools = {**config.pools, "py": dataclasses.replace(config.pools["py"], **pool_changes)}
    config = dataclasses.replace(config, host=host, pools=pools, snapshot_store=STORE)
    backend = FakeBackend(tmp_path / host / "containers", PY + WEB, {"/workspace": "tmpfs", "/tmp": "tmpfs"})
    state = tmp_path / host / "state"
    runtime = Runtime(config, backend, state, snapshot_store=store)
    audit = AuditLog(state / "audit.log")
    api = TestClient(create_app(runtime, token=TOKEN, audit=audit, monitor=False),
                     headers={"Authorization": f"Bearer {TOKEN}"})
    return Env(backend, runtime, api, state, audit)


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


@pytest.fixture
def hosts(tmp_path, store):
    envs = {name: host_env(tmp_path, name, store) for name in ("a", "b")}
    yield envs
    for env in envs.values():
        env.close()


def put(env, sandbox, path, data):
    assert env.api.put(f"/v1/sandboxes/{sandbox}/files/{path}", content=data).status_code == 204


def files(env, sandbox) -> dict[str, bytes]:
    root = env.backend.path(sandbox, "/workspace")
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def taken(env, session="chat-1") -> tuple[str, str]:
    """A session on `env` with two files, snapshotted: (its sandbox, the snapshot's id)."""
    sandbox = env.claim(session)["sandbox"]
    put(env, sandbox, "a.txt", b"from host a")
    put(env, sandbox, "dir/b.bin", bytes(range(256)) * 3)
    answer = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots")
    assert answer.status_code == 201, answer.text
    return sandbox, answer.json()["id"]


def test_a_session_snapshotted_on_one_host_is_restored_on_another(hosts, store):
    a, b = hosts["a"], hosts["b"]
    sandbox_a, snap = taken(a)
    assert ("py", snap) in store.manifests
    # Host a is lost: its session is claimed again on b from its last snapshot, which b never had.
    assert b.runtime.store.snapshot(snap) is None
    claim = b.claim("chat-1", from_snapshot=snap)
    assert files(b, claim["sandbox"]) == files(a, sandbox_a) == {"a.txt": b"from host a",
                                                                 "dir/b.bin": bytes(range(256)) * 3}
    # What b downloaded was only to restore it: no snapshot of b's, nothing left on its state volume.
    assert b.runtime.store.snapshots() == [] and list((b.state_dir / "fetched").iterdir()) == []
    # b reads it by id as a's, and an API restore rolls the session back to it.
    read = b.api.get(f"/v1/snapshots/{snap}").json()
    assert (read["id"], read["pool"], read["sandbox"], read["session"]) == (snap, "py", sandbox_a, "chat-1")
    put(b, claim["sandbox"], "a.txt", b"changed on b")
    restored = b.api.post(f"/v1/sandboxes/{claim['sandbox']}/restore", json={"snapshot": snap})
    assert (restored.status_code, restored.json()["id"]) == (200, snap)
    assert files(b, claim["sandbox"])["a.txt"] == b"from host a"


def test_a_snapshot_of_one_host_branches_on_another(hosts):
    a, b = hosts["a"], hosts["b"]
    _, snap = taken(a)
    branch = b.claim("chat-1-branch", from_snapshot=snap)
    assert branch["from_snapshot"] == snap
    assert files(b, branch["sandbox"])["a.txt"] == b"from host a"


def test_another_sessions_snapshot_from_the_store_is_404_to_a_session_token_and_409_to_the_host(hosts):
    a, b = hosts["a"], hosts["b"]
    _, snap = taken(a, "chat-1")
    mine = b.claim("chat-2")
    put(b, mine["sandbox"], "a.txt", b"chat-2's own")
    session = TestClient(b.api.app, headers={"Authorization": f"Bearer {mine['token']}"})
    refused = session.post(f"/v1/sandboxes/{mine['sandbox']}/restore", json={"snapshot": snap})
    assert (refused.status_code, refused.json()) == (404, {"error": f"snapshot {snap!r} is not on host 'b'",
                                                           "snapshot": snap, "host": "b"})
    assert session.get(f"/v1/snapshots/{snap}").status_code == 404
    assert session.delete(f"/v1/snapshots/{snap}").status_code == 404
    by_host = b.api.post(f"/v1/sandboxes/{mine['sandbox']}/restore", json={"snapshot": snap})
    assert (by_host.status_code, by_host.json()["error"]) == (
        409, f"snapshot {snap!r} is of session 'chat-1', not 'chat-2': start a session from it instead (POST "
             "/v1/sessions with from_snapshot)")
    assert files(b, mine["sandbox"]) == {"a.txt": b"chat-2's own"}


def forged_tar() -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        data = b"written outside the workspace"
        info = tarfile.TarInfo("../escape")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def test_a_tampered_tar_in_the_store_is_refused_and_binds_nothing(hosts, store):
    a, b = hosts["a"], hosts["b"]
    _, snap = taken(a)
    store.tamper("py", snap, "0.tar", forged_tar())  # re-pushed under its own digest: only the tar check sees it
    refused = b.api.post("/v1/sessions", json={"pool": "py", "session": "chat-1", "from_snapshot": snap})
    assert (refused.status_code, refused.json()["error"]) == (
        409, f"snapshot {snap!r} cannot be restored: its tar of '/workspace' is not a workspace's (entry "
             "'../escape' is a .. path)")
    assert b.runtime.store.by_session(hk("chat-1")) is None
    assert not (b.backend.root / "escape").exists()


def test_a_tar_whose_bytes_are_not_its_digests_is_refused_before_the_sandbox_changes(hosts, store):
    a, b = hosts["a"], hosts["b"]
    _, snap = taken(a)
    mine = b.claim("chat-1")
    put(b, mine["sandbox"], "a.txt", b"as it was")
    original = store.blobs[store.manifests[("py", snap)][1][0]["digest"]]
    store.tamper("py", snap, "0.tar", original[:-1] + b"x", renamed=False)
    refused = b.api.post(f"/v1/sandboxes/{mine['sandbox']}/restore", json={"snapshot": snap})
    size = len(original)
    digest = store.manifests[("py", snap)][1][0]["digest"]
    assert (refused.status_code, refused.json()["error"]) == (
        502, f"reading snapshot {snap!r} from the snapshot store: snapshot {snap!r} in the store is not one a "
             f"runtime kept: its 0.tar is not the {size} bytes of digest {digest}; nothing of it was used")
    assert files(b, mine["sandbox"]) == {"a.txt": b"as it was"}


def test_the_store_down_is_a_503_that_changes_nothing(hosts, store):
    a, b = hosts["a"], hosts["b"]
    sandbox_a, snap = taken(a)
    mine = b.claim("chat-1")
    put(b, mine["sandbox"], "a.txt", b"as it was")
    store.down = True
    took = a.api.post(f"/v1/sandboxes/{sandbox_a}/snapshots")
    assert (took.status_code, took.json()["error"]) == (
        503, f"keeping the snapshot of sandbox {sandbox_a!r} in the snapshot store: {DOWN}; nothing was changed")
    assert [s.id for s in a.runtime.store.snapshots()] == [snap]
    assert sorted(p.name for p in (a.state_dir / "snapshots").iterdir()) == [snap]
    restore = b.api.post(f"/v1/sandboxes/{mine['sandbox']}/restore", json={"snapshot": snap})
    assert (restore.status_code, restore.json()["error"]) == (
        503, f"reading snapshot {snap!r} from the snapshot store: {DOWN}; nothing was changed")
    assert files(b, mine["sandbox"]) == {"a.txt": b"as it was"}
    branch = b.api.post("/v1/sessions", json={"pool": "py", "session": "chat-9", "from_snapshot": snap})
    assert (branch.status_code, branch.json()["error"]) == (
        503, f"reading snapshot {snap!r} from the snapshot store: {DOWN}; nothing was changed")
    assert b.runtime.store.by_session(hk("chat-9")) is None
    deleted = a.api.delete(f"/v1/snapshots/{snap}")
    assert (deleted.status_code, deleted.json()["error"]) == (
        503, f"deleting snapshot {snap!r} from the snapshot store: {DOWN}; nothing was changed")
    store.down = False
    assert a.api.get(f"/v1/snapshots/{snap}").status_code == 200 and ("py", snap) in store.manifests


def test_retention_and_a_delete_drop_the_stores_copy_too(tmp_path, store):
    a = host_env(tmp_path, "a", store, retention=Retention(count=2, max_age_seconds=3600))
    sandbox = a.claim("chat-1")["sandbox"]
    ids = [a.api.post(f"/v1/sandboxes/{sandbox}/snapshots").json()["id"] for _ in range(3)]
    assert sorted(snap for _, snap in store.manifests) == sorted(ids[1:])
    assert a.api.delete(f"/v1/snapshots/{ids[2]}").status_code == 204
    assert list(store.manifests) == [("py", ids[1])]
    a.backend.close()


def test_a_store_snapshot_past_the_pools_download_limit_is_not_downloaded(tmp_path, store):
    a = host_env(tmp_path, "a", store)
    small = host_env(tmp_path, "b", store, download_limit_bytes=4096)
    _, snap = taken(a)
    size = a.runtime.store.snapshot(snap).size
    refused = small.api.post("/v1/sessions", json={"pool": "py", "session": "chat-1", "from_snapshot": snap})
    assert (refused.status_code, refused.json()["error"]) == (
        413, f"snapshot {snap!r} from the snapshot store ({size} bytes) passed the pool's download_limit of 4096 "
             "bytes (apparent size: a sparse file counts at its full length); it was stopped there and nothing was "
             "kept")
    assert store.pulls == 0 and small.runtime.store.by_session(hk("chat-1")) is None
    for env in (a, small):
        env.backend.close()


def test_the_client_restores_a_lost_hosts_session_on_another_host_of_the_pool(hosts):
    import httpx

    from sandstack.client import Client

    outputs = {"runtime": {"hosts": {"a": {"url": "http://a.test", "token": TOKEN},
                                     "b": {"url": "http://b.test", "token": TOKEN}},
                           "pools": {"py": ["a", "b"]}}}
    down: set[str] = set()

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    def factory(endpoint, timeout, headers):
        if endpoint.name in down:
            return httpx.Client(base_url=endpoint.url, headers=headers, transport=httpx.MockTransport(refused))
        return TestClient(hosts[endpoint.name].api.app, base_url=endpoint.url, headers=headers)

    client = Client.from_outputs(outputs, http_factory=factory)
    sandbox = client.host("a").claim("py", "chat-1")
    sandbox_a = sandbox["sandbox"]
    put(hosts["a"], sandbox_a, "a.txt", b"last state on a")
    snap = str(client.sandbox(f"a/{sandbox_a}").snapshot())
    assert snap.startswith("a/snap-")
    down.add("a")  # host a is lost: its snapshot's host does not answer
    restored = Client.from_outputs(outputs, http_factory=factory).claim("py", "chat-1", from_snapshot=snap)
    assert (restored.host.name, restored.read_file("a.txt")) == ("b", b"last state on a")
