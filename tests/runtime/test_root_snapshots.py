"""Snapshots and restores of a writable root (`read_only_root: false`, sandstack.runtime.rootsnap) on the fake
backend: the root's changes are kept beside the writable paths, counted and bounded, dropped with the snapshot,
and brought back by a restore or a claim from the snapshot, which stop and start the container; a failure leaves
nothing half done."""

from __future__ import annotations

import io
import os
import tarfile
import time
from dataclasses import replace

import pytest

from sandstack.runtime.backend import BackendError
from sandstack.runtime.rootsnap import RootChecked
from sandstack.runtime.store import SnapshotRow
from sandstack.runtime.tarcheck import Forged, write_tar
from tests.runtime.conftest import hk, make_config, make_env


def root_env(tmp_path, **web):
    config = make_config()
    pools = dict(config.pools)
    pools["web"] = replace(pools["web"], writable_root=True, **web)
    return make_env(tmp_path, replace(config, pools=pools))


@pytest.fixture
def env(tmp_path):
    environment = root_env(tmp_path)
    yield environment
    environment.backend.close()
    environment.audit.close()


def install(env, sandbox: str, path: str, data: bytes = b"installed", mode: int = 0o640):
    target = env.backend.path(sandbox, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    target.chmod(mode)
    return target


def ops(env, sandbox: str) -> list[str]:
    return [op for op, name in env.backend.calls if name == sandbox and op in (
        "stop", "start", "reset-root", "read-root", "write-root")]


def test_a_snapshot_keeps_the_roots_changes_and_a_claim_from_it_brings_them_back(env):
    sandbox = env.claim("s1", pool="web")["sandbox"]
    installed = install(env, sandbox, "/usr/local/bin/tool", b"#!/bin/sh\necho tool\n", 0o750)
    env.backend.whiteouts[sandbox] = {"/etc/issue"}  # an image file the session removed
    (env.backend.path(sandbox, "/workspace") / "work.txt").write_bytes(b"work")
    answer = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots")
    assert answer.status_code == 201, answer.text
    snap = answer.json()
    stored = env.state_dir / "snapshots" / snap["id"]
    assert snap["paths"] == ["/workspace", "/tmp", "/"]
    assert sorted(p.name for p in stored.iterdir()) == ["0.tar", "1.tar", "root.tar"]
    assert snap["size"] == sum(p.stat().st_size for p in stored.iterdir())
    with tarfile.open(stored / "root.tar") as tar:
        entries = {m.name: m for m in tar.getmembers()}
    assert sorted(entries) == ["etc/issue", "usr", "usr/local", "usr/local/bin", "usr/local/bin/tool"]
    assert (entries["etc/issue"].ischr(), entries["etc/issue"].devmajor, entries["etc/issue"].devminor) == (True, 0, 0)
    assert entries["usr/local/bin/tool"].mode == 0o750
    assert ("read-root", sandbox) in env.backend.calls and "stop" not in ops(env, sandbox)  # read while running

    assert env.api.delete("/v1/sessions/s1").status_code == 200
    assert not installed.exists() and sandbox not in env.backend.whiteouts  # the release reset the root

    env.backend.calls.clear()
    assert env.claim("s2", pool="web", from_snapshot=snap["id"])["sandbox"] == sandbox
    assert ops(env, sandbox) == ["stop", "reset-root", "write-root", "start"]
    assert installed.read_bytes() == b"#!/bin/sh\necho tool\n" and installed.stat().st_mode & 0o7777 == 0o750
    assert env.backend.whiteouts[sandbox] == {"/etc/issue"}  # still removed
    assert (env.backend.path(sandbox, "/workspace") / "work.txt").read_bytes() == b"work"
    assert env.api.get(f"/v1/sandboxes/{sandbox}").json()["status"] == "bound"


def test_an_api_restore_rolls_the_root_back_and_ends_the_sessions_processes(env):
    sandbox = env.claim("s1", pool="web")["sandbox"]
    install(env, sandbox, "/etc/app.conf", b"v1")
    snap = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots").json()["id"]
    install(env, sandbox, "/etc/app.conf", b"v2")
    later = install(env, sandbox, "/opt/later", b"after the snapshot")
    proc = env.api.post(f"/v1/sandboxes/{sandbox}/processes", json={"command": ["sleep", "300"]}).json()
    popen = env.backend.procs[sandbox][-1]
    env.runtime.monitor_once()  # it has seen the container's start
    restored = env.api.post(f"/v1/sandboxes/{sandbox}/restore", json={"snapshot": snap})
    assert (restored.status_code, restored.json()["paths"]) == (200, ["/workspace", "/tmp", "/"])
    assert env.backend.path(sandbox, "/etc/app.conf").read_bytes() == b"v1"
    assert not later.exists()
    assert popen.poll() is not None
    assert env.api.get(f"/v1/sandboxes/{sandbox}/processes/{proc['id']}").status_code == 404
    # The restore's own start is not a crash's restart: the monitor keeps the session.
    env.runtime.monitor_once()
    row = env.runtime.sandbox(sandbox)
    assert (row.status, row.session) == ("bound", hk("s1"))
    assert env.api.post(f"/v1/sandboxes/{sandbox}/exec", json={"command": ["true"]}).status_code == 200


def test_a_snapshot_without_a_root_part_gives_the_image_root_back(env):
    sandbox = env.claim("s1", pool="web")["sandbox"]
    (env.backend.path(sandbox, "/workspace") / "work.txt").write_bytes(b"work")
    snap = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots").json()
    # As a runtime before this change stored it: the writable paths only.
    env.runtime.store.delete_snapshot(snap["id"])
    os.remove(env.state_dir / "snapshots" / snap["id"] / "root.tar")
    env.runtime.store.add_snapshot(SnapshotRow(snap["id"], "web", sandbox, "s1", time.time(), snap["size"],
                                               "/workspace\n/tmp"))
    installed = install(env, sandbox, "/usr/local/bin/later")
    env.backend.calls.clear()
    restored = env.api.post(f"/v1/sandboxes/{sandbox}/restore", json={"snapshot": snap["id"]})
    assert (restored.status_code, restored.json()["paths"]) == (200, ["/workspace", "/tmp"])
    assert ops(env, sandbox) == ["stop", "reset-root", "start"]
    assert not installed.exists()
    assert (env.backend.path(sandbox, "/workspace") / "work.txt").read_bytes() == b"work"


def test_a_root_past_what_is_left_of_the_snapshot_storage_is_507_and_keeps_nothing(tmp_path):
    env = root_env(tmp_path, snapshot_storage_bytes=30 * 1024)
    try:
        sandbox = env.claim("s1", pool="web")["sandbox"]
        install(env, sandbox, "/usr/local/lib/big.bin", os.urandom(40 * 1024))
        cut = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots")
        assert (cut.status_code, cut.json()["error"]) == (
            507, f"the snapshot of sandbox {sandbox!r} passed the {30 * 1024} bytes left of pool 'web''s "
                 f"snapshot_storage of {30 * 1024} bytes (0 used on host 'local'); it was stopped there and nothing "
                 "was kept")
        assert list((env.state_dir / "snapshots").iterdir()) == []
        assert env.api.get("/v1/snapshots").json() == []
    finally:
        env.backend.close()
        env.audit.close()


def test_retention_drops_the_root_part_with_its_snapshot(env):
    sandbox = env.claim("s1", pool="web")["sandbox"]
    install(env, sandbox, "/opt/x")
    snap = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots").json()["id"]
    assert (env.state_dir / "snapshots" / snap / "root.tar").exists()
    assert env.runtime.snapshots.apply_retention(time.time() + 10 * 365 * 86400) == [snap]
    assert not (env.state_dir / "snapshots" / snap).exists()


def test_a_failed_root_write_on_a_claim_fails_it_and_resets_the_sandbox(env):
    sandbox = env.claim("s1", pool="web")["sandbox"]
    install(env, sandbox, "/opt/x")
    snap = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots").json()["id"]
    assert env.api.delete("/v1/sessions/s1").status_code == 200

    def fails(name, tar):
        raise BackendError(f"the writable root of {name!r} could not be written back (exit 2): tar: no space")

    env.backend.write_root = fails
    answer = env.api.post("/v1/sessions", json={"pool": "web", "session": "s2", "from_snapshot": snap})
    assert (answer.status_code, answer.json()["error"]) == (
        502, f"the writable root of {sandbox!r} could not be written back (exit 2): tar: no space")
    row = env.runtime.sandbox(sandbox)
    assert (row.status, row.session) == ("idle", None)
    assert not env.backend.path(sandbox, "/opt/x").exists()
    assert env.backend.status[sandbox] == "running"


def test_a_failed_root_write_on_an_api_restore_ends_the_session_and_resets_the_sandbox(env):
    sandbox = env.claim("s1", pool="web")["sandbox"]
    install(env, sandbox, "/opt/x")
    snap = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots").json()["id"]
    install(env, sandbox, "/opt/y")

    def fails(name, tar):
        raise BackendError(f"the writable root of {name!r} could not be written back (exit 2): tar: no space")

    env.backend.write_root = fails
    answer = env.api.post(f"/v1/sandboxes/{sandbox}/restore", json={"snapshot": snap})
    assert (answer.status_code, answer.json()["error"]) == (
        502, f"restoring snapshot {snap!r} into sandbox {sandbox!r} failed while its root was written back (the "
             f"writable root of {sandbox!r} could not be written back (exit 2): tar: no space); the sandbox was "
             "reset and session 's1' has ended")
    row = env.runtime.sandbox(sandbox)
    assert (row.status, row.session) == ("idle", None)
    assert not env.backend.path(sandbox, "/opt/x").exists() and not env.backend.path(sandbox, "/opt/y").exists()


def test_a_restore_while_an_exec_runs_is_409_and_stops_nothing(env):
    sandbox = env.claim("s1", pool="web")["sandbox"]
    snap = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots").json()["id"]
    env.backend.calls.clear()
    with env.runtime.leases.use(sandbox):  # an exec or a transfer under way
        answer = env.api.post(f"/v1/sandboxes/{sandbox}/restore", json={"snapshot": snap})
    assert (answer.status_code, answer.json()["error"]) == (
        409, f"sandbox {sandbox!r} is busy: an exec or a file, archive, snapshot or restore is running in it, or a "
             "pause; restore the snapshot when that has finished")
    assert ops(env, sandbox) == []
    with env.runtime.leases.restoring(sandbox):  # and none starts while a restore has the container stopped
        refused = env.api.post(f"/v1/sandboxes/{sandbox}/exec", json={"command": ["true"]})
    assert (refused.status_code, refused.json()["error"]) == (
        409, f"sandbox {sandbox!r} is being restored from a snapshot (its root, the container stopped); try again "
             "when the restore has answered")


def test_a_forged_root_tar_is_409_and_changes_nothing(env):
    sandbox = env.claim("s1", pool="web")["sandbox"]
    snap = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots").json()["id"]
    forged = io.BytesIO()
    with tarfile.open(fileobj=forged, mode="w") as tar:
        tar.addfile(tarfile.TarInfo("../escape"), io.BytesIO(b""))
    (env.state_dir / "snapshots" / snap / "root.tar").write_bytes(forged.getvalue())
    env.backend.calls.clear()
    answer = env.api.post(f"/v1/sandboxes/{sandbox}/restore", json={"snapshot": snap})
    assert (answer.status_code, answer.json()["error"]) == (
        409, f"snapshot {snap!r} cannot be restored: its tar of the root is not a root's changes (entry '../escape' "
             "is a .. path)")
    assert ops(env, sandbox) == []


def test_a_snapshot_with_a_root_into_a_read_only_root_pool_is_409(env):
    sandbox = env.claim("s1", pool="web")["sandbox"]
    snap = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots").json()["id"]
    pools = dict(env.runtime.config.pools)
    pools["web"] = replace(pools["web"], writable_root=False)
    env.runtime.live.swap(replace(env.runtime.config, pools=pools), None, {})
    answer = env.api.post(f"/v1/sandboxes/{sandbox}/restore", json={"snapshot": snap})
    assert (answer.status_code, answer.json()["error"]) == (
        409, f"snapshot {snap!r} holds a writable root, but pool 'web' now has a read-only one")


def _tar(*members: tarfile.TarInfo) -> tarfile.TarFile:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member in members:
            tar.addfile(member, io.BytesIO(b"x" * member.size) if member.isreg() else None)
    raw.seek(0)
    return tarfile.open(fileobj=raw, mode="r|")


def _member(name: str, kind: bytes = tarfile.REGTYPE, size: int = 0, **fields) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def test_the_root_check_keeps_whiteouts_and_links_anywhere_and_leaves_devices_out():
    checked = RootChecked(_tar(
        _member("./"), _member("etc", tarfile.DIRTYPE), _member("etc/issue", tarfile.CHRTYPE),
        _member("etc/motd", size=3), _member("etc/alt", tarfile.SYMTYPE, linkname="/usr/bin/python3"),
        _member("dev-sda", tarfile.BLKTYPE, devmajor=8), _member("tty", tarfile.CHRTYPE, devmajor=5),
        _member("fifo", tarfile.FIFOTYPE), _member("etc/motd2", tarfile.LNKTYPE, linkname="etc/motd")), 100)
    out = io.BytesIO()
    write_tar(checked, out)
    out.seek(0)
    with tarfile.open(fileobj=out) as tar:
        assert [(m.name, m.type) for m in tar.getmembers()] == [
            ("etc", tarfile.DIRTYPE), ("etc/issue", tarfile.CHRTYPE), ("etc/motd", tarfile.REGTYPE),
            ("etc/alt", tarfile.SYMTYPE), ("fifo", tarfile.FIFOTYPE), ("etc/motd2", tarfile.LNKTYPE)]
    assert checked.left_out == ["dev-sda", "tty"]


@pytest.mark.parametrize("members, why", [
    ([_member("/etc/passwd")], "entry '/etc/passwd' is an absolute path"),
    ([_member("etc", tarfile.SYMTYPE, linkname="/host"), _member("etc/passwd")],
     "entry 'etc/passwd' lies under a symlink of the same stream"),
    ([_member("usr/x"), _member("usr", tarfile.SYMTYPE, linkname="/")],
     "entry 'usr' turns a directory of the same stream into a symlink"),
])
def test_the_root_check_refuses_what_could_write_outside_the_root(members, why):
    with pytest.raises(Forged) as refused:
        list(RootChecked(_tar(*members), 100))
    assert str(refused.value) == why
