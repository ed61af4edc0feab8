"""A writable root in snapshots on the real engine (sandstack.runtime.rootsnap and rootfs's read_root/write_root):
what a session installed, changed and removed outside its writable paths is kept by a snapshot, gone after a
release (the root reset), and back, owners and modes included, for a session claimed from the snapshot.

As in test_root_reset.py the container is made here rather than through a stack (a stack with a writable root
needs a host with `storage_quota`, which this engine cannot give): the sandbox's shape (its image, a command, the
sandbox user, a tmpfs workspace), driven by a real Runtime over DockerBackend through its HTTP API. The session's
root changes are made as root (a package manager's), so that owners other than the sandbox user's are covered.
"""

from __future__ import annotations

import io
import os
import tarfile
import time
import uuid
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from sandstack.plan.runtime import IdlePolicy, PoolRuntime, RuntimeConfig, WritablePath
from sandstack.runtime.app import create_app
from sandstack.runtime.audit import AuditLog
from sandstack.runtime.docker_backend import DockerBackend
from sandstack.runtime import rootsnap
from sandstack.runtime.service import Runtime
from testbed.harness.docker_backend import LABEL_PID, LABEL_SESSION
from tests.engine.sandbox_helpers import sh

pytestmark = pytest.mark.docker

TOKEN = "engine-root-snapshot-0123456789"
# A package's install (owned by another user, its own mode), a changed config, a removed image file (its whiteout),
# a directory nobody but its owner may enter.
SESSION = """
set -e
mkdir -p /usr/local/lib/tool
printf '#!/bin/sh\\necho tool\\n' > /usr/local/bin/tool
chown 4242:4343 /usr/local/bin/tool && chmod 4750 /usr/local/bin/tool
echo changed > /etc/debian_version
rm /etc/issue
mkdir /opt/private && echo secret > /opt/private/key && chown -R 4242:4242 /opt/private && chmod 700 /opt/private
mkdir /opt/shared && chown 4242:4343 /opt/shared && chmod 2770 /opt/shared
"""
LOOK = """
stat -c '%n %u:%g %a' /usr/local/bin/tool /opt/private /opt/private/key /opt/shared 2>&1 | sed 's/^stat: //'
cat /opt/private/key 2>/dev/null || echo 'no key'
echo "/etc/debian_version: $(cat /etc/debian_version)"
[ -e /etc/issue ] && echo '/etc/issue: present' || echo '/etc/issue: absent'
"""
AFTER_SESSION = ["/usr/local/bin/tool 4242:4343 4750", "/opt/private 4242:4242 700", "/opt/private/key 4242:4242 644",
                 "/opt/shared 4242:4343 2770", "secret", "/etc/debian_version: changed", "/etc/issue: absent"]


@pytest.fixture
def container(docker_client, debian_image, harness_sweep_orphans):
    name = f"sandstack-root-snap-{uuid.uuid4().hex[:8]}"
    labels = {LABEL_SESSION: f"root-snap-{uuid.uuid4().hex}", LABEL_PID: str(os.getpid()),
              "sandstack.role": "sandbox"}
    created = docker_client.containers.create(
        debian_image, ["sleep", "infinity"], name=name, labels=labels, user="10001:10001", network_mode="none",
        init=True, tmpfs={"/workspace": "uid=10001,gid=10001,mode=0700"}, stop_signal="SIGKILL")
    created.start()
    try:
        yield created
    finally:
        created.remove(force=True)
        assert docker_client.containers.list(all=True, filters={"label": f"{LABEL_SESSION}={labels[LABEL_SESSION]}"}) \
            == [], "a root helper was left behind"


@pytest.fixture
def api(container, tmp_path):
    pool = PoolRuntime((container.name,), "/workspace", (WritablePath("/workspace"),), idle=IdlePolicy("reset", 3600),
                       writable_root=True)
    backend = DockerBackend()
    runtime = Runtime(RuntimeConfig(host="local", pools={"web": pool}, exec_timeout_seconds=60), backend,
                      tmp_path / "state")
    audit = AuditLog(tmp_path / "state" / "audit.log")
    client = TestClient(create_app(runtime, token=TOKEN, audit=audit, monitor=False),
                        headers={"Authorization": f"Bearer {TOKEN}"})
    yield SimpleNamespace(http=client, runtime=runtime, state=tmp_path / "state")
    backend.close()
    audit.close()


def _root_sh(container, script: str) -> list[str]:
    code, out = sh(container, script, user="0:0")
    assert code == 0, out
    return out.splitlines()


def test_a_claim_from_a_snapshot_brings_the_roots_changes_back_after_a_release_reset_them(container, api):
    image = _root_sh(container, LOOK)
    sandbox = api.http.post("/v1/sessions", json={"pool": "web", "session": "s1"}).json()["sandbox"]
    assert sandbox == container.name
    _root_sh(container, SESSION)
    assert api.http.put(f"/v1/sandboxes/{sandbox}/files/work.txt", content=b"work").status_code == 204
    assert _root_sh(container, LOOK) == AFTER_SESSION

    started = time.monotonic()
    answer = api.http.post(f"/v1/sandboxes/{sandbox}/snapshots")
    snapshot_seconds = time.monotonic() - started
    assert answer.status_code == 201, answer.text
    snap = answer.json()
    stored = api.state / "snapshots" / snap["id"]
    assert snap["paths"] == ["/workspace", "/"]
    assert snap["size"] == sum(p.stat().st_size for p in stored.iterdir())
    with tarfile.open(stored / "root.tar") as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert (members["etc/issue"].ischr(), members["etc/issue"].devmajor, members["etc/issue"].devminor) == (True, 0, 0)
    tool = members["usr/local/bin/tool"]
    assert (tool.uid, tool.gid, tool.mode) == (4242, 4343, 0o4750)
    container.reload()
    assert container.attrs["State"]["Running"]  # read while it ran

    assert api.http.delete("/v1/sessions/s1").status_code == 200
    assert _root_sh(container, LOOK) == image  # the release reset the root

    started = time.monotonic()
    claimed = api.http.post("/v1/sessions", json={"pool": "web", "session": "s2", "from_snapshot": snap["id"]})
    restore_seconds = time.monotonic() - started
    assert claimed.status_code == 201, claimed.text
    assert _root_sh(container, LOOK) == AFTER_SESSION
    assert api.http.get(f"/v1/sandboxes/{sandbox}/files/work.txt").content == b"work"
    # The sandbox runs as before: its own user, its command.
    assert container.exec_run(["id", "-u"]).output.decode().strip() == "10001"
    print(f"\nroot snapshot: {snap['size']} bytes in {snapshot_seconds:.2f}s; claim from it (stop, reset, write, "
          f"start, workspace) in {restore_seconds:.2f}s")


def test_an_api_restore_rolls_the_root_back_and_the_session_keeps_its_sandbox(container, api):
    sandbox = api.http.post("/v1/sessions", json={"pool": "web", "session": "s1"}).json()["sandbox"]
    _root_sh(container, SESSION)
    snap = api.http.post(f"/v1/sandboxes/{sandbox}/snapshots").json()["id"]
    _root_sh(container, "echo later > /etc/debian_version && echo added > /opt/later && touch /etc/issue")
    restored = api.http.post(f"/v1/sandboxes/{sandbox}/restore", json={"snapshot": snap})
    assert restored.status_code == 200, restored.text
    assert _root_sh(container, LOOK) == AFTER_SESSION
    assert _root_sh(container, "[ -e /opt/later ] && echo present || echo absent") == ["absent"]
    row = api.runtime.sandbox(sandbox)
    assert (row.status, row.session) == ("bound", "host/s1")  # session ids are kept per token scope
    assert api.http.post(f"/v1/sandboxes/{sandbox}/exec", json={"command": ["true"]}).status_code == 200


def test_a_directory_removed_and_made_again_comes_back_merged_with_the_images(container, api):
    """What docs/design/runtime.md says is lost: overlay's opaque mark (CAP_SYS_ADMIN's to read), so the image's
    files of a directory the session replaced reappear beside the session's own after a restore."""
    sandbox = api.http.post("/v1/sessions", json={"pool": "web", "session": "s1"}).json()["sandbox"]
    image = _root_sh(container, "ls /etc/apt")
    assert image  # the image has files there
    _root_sh(container, "rm -rf /etc/apt && mkdir /etc/apt && echo mine > /etc/apt/mine")
    assert _root_sh(container, "ls /etc/apt") == ["mine"]
    snap = api.http.post(f"/v1/sandboxes/{sandbox}/snapshots").json()["id"]
    assert api.http.post(f"/v1/sandboxes/{sandbox}/restore", json={"snapshot": snap}).status_code == 200
    assert _root_sh(container, "ls /etc/apt") == sorted([*image, "mine"])


def test_a_root_snapshot_holds_the_upper_directory_only(container):
    """What read_root gives: the session's changes, none of the image's own files (a snapshot is not an image)."""
    _root_sh(container, "echo one > /opt/one")
    backend = DockerBackend()
    target = io.BytesIO()
    try:
        rootsnap.read(backend, container.name, 10 * 1024 * 1024, target)
    finally:
        backend.close()
    target.seek(0)
    with tarfile.open(fileobj=target) as tar:
        names = tar.getnames()
    assert "opt/one" in names and "etc/passwd" not in names and "usr/bin/sh" not in names
