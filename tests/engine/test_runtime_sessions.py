"""No session sees another's data, on the real engine: a release or an idle stop leaves nothing of a session in a
disk workspace (a `chmod 555` directory included) nor a process running; a seeded workspace is seeded again; a
reset that cannot make a sandbox clean quarantines it until a retry can; an expired `on_expiry: stop` sandbox is
not handed out again; snapshots, restores, branches and archives work on a disk workspace (its `lost+found` left
alone); and a restart of the host guard keeps the idle clocks it measures."""

from __future__ import annotations

import io
import subprocess
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
import yaml

from sandstack.client import SandstackError
from sandstack.plan.contract import EXIT_IDLE, EXIT_LIFETIME, workspace_dir
from testbed.deploy import engine_spec, shared_deployment
from tests.engine.runtime_helpers import local_client
from tests.engine.sandbox_helpers import ended, guard_expiries, sh_in_a_run
from testbed.waiting import wait_until

pytestmark = pytest.mark.docker

PORT = 17486
TOKEN = "engine-test-runtime-token-sessions-01"
SEEDED = "cloned at build time\n"
IDLE_TIMEOUT = 20  # the guard's idle timeout of pool 'idler'
LIFETIME = 20  # the guard's max lifetime of pool 'expiring'


def _agent(image: str, writable: list[dict], **extra) -> dict:
    return {"base_image": image, "command": ["sleep", "infinity"], "limits": {"memory": "64MiB", "disk": "256MiB"},
            "filesystem": {"writable": writable}, "session": {"idle": "never"}, **extra}


def _spec(image: str) -> str:
    disk = {"path": "/data", "type": "disk", "size": "16MiB"}
    tmp = {"path": "/tmp", "size": "8MiB"}
    templates = {
        # The session's root is the disk workspace itself: archives, snapshots and restores meet its lost+found.
        "disk": _agent(image, [disk, {"path": "/workspace", "size": "8MiB"}],
                       workdir="/workspace", session={"idle": "never", "workspace": "/data"}),
        "seeded": _agent(image, [tmp, {"path": "/srv/repo", "type": "disk", "size": "16MiB", "seed": True}],
                         snapshot={"version": "1", "setup": [
                             f"mkdir -p /srv/repo && printf '{SEEDED}' > /srv/repo/README "
                             "&& chown -R 10001:10001 /srv/repo"]},
                         session={"idle": "never", "workspace": "/srv/repo"}),
        "stopper": _agent(image, [disk, tmp], session={"idle": "stop", "idle_after": "3s", "workspace": "/data"}),
        "expiring": _agent(image, [tmp], lifecycle={"max_lifetime": f"{LIFETIME}s", "on_expiry": "stop"}),
        "idler": _agent(image, [tmp], lifecycle={"idle_timeout": f"{IDLE_TIMEOUT}s", "on_expiry": "restart"}),
    }
    data = yaml.safe_load(engine_spec(image, templates, {name: {"template": name, "hosts": ["local"], "replicas": 1}
                                                        for name in templates}))
    data["hosts"]["local"]["runtime"] = {"port": PORT, "token": {"secret": "runtimeToken"}}
    data["hosts"]["local"]["disk_workspaces"] = "1GiB"
    return yaml.safe_dump(data, sort_keys=False)


@pytest.fixture(scope="module")
def stack(debian_image, harness_sweep_orphans, tmp_path_factory):
    with shared_deployment(__file__, tmp_path_factory.mktemp("runtime-sessions"), _spec(debian_image),
                           secret_config={"runtimeToken": TOKEN}) as shared:
        yield shared


@pytest.fixture
def client(stack):
    assert stack.result.outputs["runtime"]["hosts"]["local"]["url"] == f"http://127.0.0.1:{PORT}"
    with local_client(PORT, TOKEN, ("disk", "seeded", "stopper", "expiring", "idler")) as c:
        yield c


def _left(sandbox, *paths: str) -> list[str]:
    """What is in the paths (hidden entries too), `lost+found` with its owner and mode, and any `sleep 1000`."""
    out = sandbox.exec(["sh", "-c", f"ls -A {' '.join(paths)}; stat -c '%U %a' /data/lost+found 2>/dev/null; "
                                    "pgrep -f 'sleep 100[0]' || echo no-process"])
    return out["stdout"].split("\n")[:-1]


def test_a_release_leaves_nothing_of_the_session_in_a_disk_workspace(client):
    first = client.claim("disk", "leaver")
    made = first.exec(["sh", "-c", "mkdir /data/locked && echo secret > /data/locked/secret.txt && chmod 555 "
                                   "/data/locked && echo x > /data/.hidden && echo x > /workspace/t && "
                                   "(nohup sleep 1000 >/dev/null 2>&1 &) && ls -A /data"])
    assert made["stdout"].split() == [".hidden", "locked", "lost+found"], made
    released = first.release()
    assert (released["status"], released["detail"]) == ("idle", None), released
    second = client.claim("disk", "next")  # the pool's one sandbox: the same container
    assert second.name == first.name
    assert _left(second, "/data", "/workspace") == ["/data:", "lost+found", "", "/workspace:", "root 700",
                                                    "no-process"]


def test_snapshot_restore_branch_and_archive_work_on_a_disk_workspace(client):
    sandbox = client.claim("disk", "snapper")
    sandbox.write_file("notes.txt", "v1")
    snap = sandbox.snapshot()
    sandbox.write_file("notes.txt", "v2")
    sandbox.write_file("extra.txt", "x")
    sandbox.restore(snap)
    assert sandbox.read_file("notes.txt") == b"v1"
    assert sandbox.exec(["ls", "-A", "/data"])["stdout"].split() == ["lost+found", "notes.txt"]
    with tarfile.open(fileobj=io.BytesIO(sandbox.archive("tar.gz")), mode="r:gz") as packed:
        assert packed.getnames() == ["notes.txt"]  # the data once, without the filesystem's lost+found
    assert zipfile.ZipFile(io.BytesIO(sandbox.archive("zip"))).namelist() == ["notes.txt"]
    sandbox.release()
    branch = client.claim("disk", "branch", from_snapshot=snap)
    assert branch.read_file("notes.txt") == b"v1"
    assert _left(branch, "/data") == ["lost+found", "notes.txt", "root 700", "no-process"]


def _device(stack, sandbox: str) -> str:
    """The loop device of the sandbox's /data workspace (the guard's link, sandstack.plan.workspace)."""
    return str(Path(workspace_dir(stack.stack), f"{sandbox}-ws0-16m.dev").resolve())


def test_a_reset_that_cannot_empty_a_workspace_quarantines_the_sandbox_until_a_retry_can(stack, client, tmp_path):
    sandbox = client.claim("disk", "stuck")
    sandbox.exec(["sh", "-c", "echo secret > /data/stuck.txt"])
    # A file no reset can remove (immutable: root on the host only; the reset's helper has no LINUX_IMMUTABLE).
    mount = tmp_path / "mnt"
    mount.mkdir()
    subprocess.run(["mount", "-t", "ext4", _device(stack, sandbox.name), str(mount)], check=True)
    try:
        subprocess.run(["chattr", "+i", str(mount / "stuck.txt")], check=True)
        released = sandbox.release()
        assert released["status"] == "quarantined", released
        assert released["detail"].startswith("reset failed, retried by the monitor: the disk workspace '/data' of "
                                             f"'{sandbox.name}' could not be emptied (exit 1): "), released
        assert "stuck.txt" in released["detail"], released
        with pytest.raises(SandstackError) as refused:  # its one sandbox is out of the pool, not handed out
            client.host("local").claim("disk", "after")
        assert refused.value.status == 503
        assert f"{sandbox.name} is quarantined (reset failed" in refused.value.message, refused.value.message
        time.sleep(12)  # two monitor passes: each retries the reset, and each fails the same way
        assert client.host("local").status(sandbox.name)["status"] == "quarantined"
        subprocess.run(["chattr", "-i", str(mount / "stuck.txt")], check=True)
    finally:
        subprocess.run(["umount", str(mount)], check=True)
    wait_until(lambda: client.host("local").status(sandbox.name)["status"] == "idle", 60,
               what="the monitor's retry to reset the sandbox")
    after = client.claim("disk", "after")
    assert after.name == sandbox.name
    assert _left(after, "/data") == ["lost+found", "root 700", "no-process"]


def test_a_seeded_disk_workspace_is_seeded_again_by_the_reset(client):
    first = client.claim("seeded", "seed-1")
    first.exec(["sh", "-c", "echo edit >> /srv/repo/README && echo mine > /srv/repo/mine.txt"])
    first.release()
    second = client.claim("seeded", "seed-2")
    out = second.exec(["sh", "-c", "ls -A /srv/repo; cat /srv/repo/README; stat -c %u /srv/repo/README"])
    assert out["stdout"] == f"README\n{SEEDED}10001\n", out


def test_an_idle_stop_leaves_nothing_of_the_session_for_the_next(stack, client):
    first = client.claim("stopper", "sleepy")
    first.exec(["sh", "-c", "echo secret > /data/secret.txt && echo x > /tmp/t"])
    wait_until(lambda: first.status()["status"] == "idle", 60, what="the idle session to be stopped and cleaned")
    stopped = first.status()
    assert (stopped["status"], stopped["detail"], stopped["container"]) == (
        "idle", "stopped after being idle", "exited"), stopped
    second = client.claim("stopper", "awake")
    assert second.name == first.name
    assert second.exec(["sh", "-c", "ls -A /data /tmp"])["stdout"].split() == ["/data:", "lost+found", "/tmp:"]


def test_an_expired_stop_sandbox_is_not_handed_out_again(stack, client):
    container = stack.container("expiring")
    final = ended(container, within=120)
    assert final["ExitCode"] == EXIT_LIFETIME, final
    with pytest.raises(SandstackError) as refused:
        client.host("local").claim("expiring", "late")
    assert refused.value.status == 503
    assert refused.value.message == (
        f"no capacity: no sandbox of pool 'expiring' on host 'local' is idle (1 declared, 1 out of service: "
        f"{container.name} is expired (its max lifetime was reached (exit {EXIT_LIFETIME}) and on_expiry 'stop' "
        "keeps it stopped: it is not handed out again))")
    assert client.host("local").status(container.name)["status"] == "expired"
    container.reload()  # the refused claim did not start it
    assert (container.attrs["State"]["Status"], container.attrs["State"]["FinishedAt"]) == (
        "exited", final["FinishedAt"])


def test_a_restart_of_the_guard_keeps_the_idle_clock(stack, docker_client):
    sandbox = stack.container("idler")
    # Active now (CPU well over the idle share), then idle: the guard's idle clock starts about here.
    code, _ = sh_in_a_run(sandbox, "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
    assert code == 0
    active = time.time()
    time.sleep(4)
    restarted = int(time.time())
    docker_client.containers.get(stack.name("guard")).restart(timeout=10)

    def ended_after_restart():
        return next((r for r in guard_expiries(stack, sandbox) if r.now >= restarted), None)

    record = wait_until(ended_after_restart, 120, what="the guard to end the idle sandbox")
    assert (record.reason, record.limit, record.exit) == ("idle timeout", IDLE_TIMEOUT, EXIT_IDLE), record
    # Idle since before the restart, by the clock the guard kept, not since the new guard's first look.
    assert record.since < restarted, (record, restarted, active)
    assert record.now - record.since >= IDLE_TIMEOUT, record
