"""What a reset leaves of a session, on the fake backend: nothing in a disk workspace (its `lost+found` aside),
a seeded one seeded again, a sandbox it cannot clean quarantined until a retry can, an idle 'stop' cleaned at once,
and a sandbox the host guard expired (on_expiry 'stop') never handed out again."""

from __future__ import annotations

import io
import tarfile
import pytest

from sandstack.plan.runtime import IdlePolicy, PoolRuntime, RuntimeConfig, WritablePath
from sandstack.spec.contract import EXIT_IDLE, EXIT_LIFETIME
from tests.runtime.conftest import PY, WEB, make_env

DISK = (WritablePath("/data", "disk"), WritablePath("/repo", "disk", seed=True), WritablePath("/tmp"))


@pytest.fixture
def env(tmp_path):
    pools = {"py": PoolRuntime(tuple(PY), "/data", DISK), "web": PoolRuntime(tuple(WEB), "/data", DISK,
                                                                              idle=IdlePolicy("stop", 5))}
    config = RuntimeConfig(host="local", pools=pools, exit_lifetime=EXIT_LIFETIME, exit_idle=EXIT_IDLE)
    environment = make_env(tmp_path, config, {"/data": "disk", "/repo": "disk", "/tmp": "tmpfs"})
    for name in PY + WEB:
        environment.backend.path(name, "/data/lost+found").mkdir(mode=0o700)
    environment.backend.image["/repo"] = {"README": b"cloned\n"}
    yield environment
    environment.backend.close()
    environment.audit.close()


def _files(env, name: str) -> dict[str, list[str]]:
    return {path: sorted(p.name for p in env.backend.path(name, path).iterdir()) for path in ("/data", "/repo", "/tmp")}


def _leave_a_mess(env, name: str) -> None:
    """A session's files in each writable path (the fake's processes see host paths: each runs in its path)."""
    for cwd, script in (("/data", "mkdir locked && echo secret > locked/s && chmod 555 locked && echo x > .h"),
                        ("/repo", "echo x >> README; echo x > mine"), ("/tmp", "echo x > t")):
        response = env.api.post(f"/v1/sandboxes/{name}/exec", json={"script": script, "cwd": cwd})
        assert response.json()["exit_code"] == 0, response.json()


def test_a_release_empties_disk_workspaces_keeps_lost_found_and_seeds_again(env):
    name = env.claim("s1")["sandbox"]
    _leave_a_mess(env, name)
    assert env.api.delete("/v1/sessions/s1").json()["status"] == "idle"
    assert _files(env, name) == {"/data": ["lost+found"], "/repo": ["README"], "/tmp": []}
    assert env.backend.path(name, "/repo/README").read_bytes() == b"cloned\n"
    assert ("stop", name) in env.backend.calls and ("clean", name) in env.backend.calls


def test_a_reset_that_cannot_clean_quarantines_the_sandbox_until_the_monitor_can(env):
    name = env.claim("s1", pool="web")["sandbox"]
    _leave_a_mess(env, name)
    env.backend.stuck.add(env.backend.path(name, "/data/locked/s"))
    released = env.api.delete("/v1/sessions/s1").json()
    assert (released["status"], released["detail"]) == ("quarantined", (
        f"reset failed, retried by the monitor: the disk workspace '/data' of '{name}' could not be emptied "
        "(exit 1): rm: cannot remove 'locked': Operation not permitted"))
    refused = env.api.post("/v1/sessions", json={"pool": "web", "session": "s2"})
    assert (refused.status_code, refused.json()["out_of_service"]) == (503, {name: "quarantined"})
    assert refused.json()["error"].startswith(
        f"no capacity: no sandbox of pool 'web' on host 'local' is idle (1 declared, 1 out of service: {name} is "
        "quarantined (reset failed, retried by the monitor: ")
    env.runtime.monitor_once()
    assert env.runtime.sandbox(name).status == "quarantined"  # still not clean: still out of the pool
    env.backend.stuck.clear()
    env.runtime.monitor_once()
    assert env.runtime.sandbox(name).status == "idle"
    assert _files(env, name)["/data"] == ["lost+found"]
    assert env.claim("s2", pool="web")["sandbox"] == name


def test_an_idle_stop_cleans_the_sandbox_at_once_and_the_next_claim_starts_it(env):
    name = env.claim("s1", pool="web")["sandbox"]
    _leave_a_mess(env, name)
    since = env.runtime.sandbox(name).last_activity
    env.runtime.monitor_once(now=since + 1)  # first CPU sample
    env.runtime.monitor_once(now=since + 7)
    row = env.runtime.sandbox(name)
    assert (row.status, row.session, row.detail, env.backend.status[name]) == (
        "idle", None, "stopped after being idle", "exited")
    assert _files(env, name) == {"/data": ["lost+found"], "/repo": ["README"], "/tmp": ["t"]}  # tmpfs: at start
    assert env.claim("s2", pool="web")["sandbox"] == name
    assert (env.backend.status[name], _files(env, name)["/tmp"]) == ("running", [])


@pytest.mark.parametrize("code, limit", [(EXIT_LIFETIME, "max lifetime"), (EXIT_IDLE, "idle timeout")])
def test_a_sandbox_the_guard_expired_is_not_handed_out_again(env, code, limit):
    env.backend.die(WEB[0], exit_code=code)  # ended for good by the host guard while idle
    refused = env.api.post("/v1/sessions", json={"pool": "web", "session": "late"})
    assert refused.status_code == 503
    assert refused.json()["error"] == (
        f"no capacity: no sandbox of pool 'web' on host 'local' is idle (1 declared, 1 out of service: {WEB[0]} is "
        f"expired (its {limit} was reached (exit {code}) and on_expiry 'stop' keeps it stopped: it is not handed "
        "out again))")
    assert env.backend.status[WEB[0]] == "exited"  # not started
    env.runtime.monitor_once()
    assert env.runtime.sandbox(WEB[0]).status == "expired"
    env.backend.start(WEB[0])  # a run: one of Docker's crash retries (ended at once), or a new container
    env.runtime.monitor_once()
    assert env.runtime.sandbox(WEB[0]).status == "expired"
    env.runtime.monitor_once()  # the same run at the next pass: a new container in its place, fresh
    assert env.runtime.sandbox(WEB[0]).status == "idle"


def test_a_sandbox_that_expires_while_bound_is_cleaned_and_reported_expired(env):
    name = env.claim("s1", pool="web")["sandbox"]
    _leave_a_mess(env, name)
    env.backend.die(name, exit_code=EXIT_LIFETIME)
    env.runtime.monitor_once()  # bound, not running: unhealthy
    env.runtime.monitor_once()  # its reset
    row = env.runtime.sandbox(name)
    assert (row.status, row.session, env.backend.status[name]) == ("expired", None, "exited")
    assert _files(env, name)["/data"] == ["lost+found"]


def test_archive_snapshot_and_restore_leave_lost_found_alone(env):
    name = env.claim("s1")["sandbox"]
    env.api.put(f"/v1/sandboxes/{name}/files/notes.txt", content=b"v1")
    snapshot = env.api.post(f"/v1/sandboxes/{name}/snapshots").json()["id"]
    env.api.put(f"/v1/sandboxes/{name}/files/notes.txt", content=b"v2")
    assert env.api.post(f"/v1/sandboxes/{name}/restore", json={"snapshot": snapshot}).status_code == 200
    assert _files(env, name)["/data"] == ["lost+found", "notes.txt"]
    with tarfile.open(env.state_dir / "snapshots" / snapshot / "0.tar") as stored:
        assert stored.getnames() == ["notes.txt"]
    archive = env.api.get(f"/v1/sandboxes/{name}/archive")
    with tarfile.open(fileobj=io.BytesIO(archive.content), mode="r:gz") as packed:
        assert packed.getnames() == ["notes.txt"]


def test_only_a_disk_workspace_may_be_seeded():
    with pytest.raises(ValueError, match="writable.seed: '/tmp' is a tmpfs; only a disk workspace is seeded"):
        WritablePath("/tmp", seed=True)
    assert (WritablePath("/d", "disk").keep, WritablePath("/d", "disk", seed=True).keep) == (("lost+found",), ())


def test_a_warm_sandbox_made_after_it_was_found_missing_joins_the_pool_without_a_reset(env):
    # An apply adding a replica: the runtime takes the configuration naming it before the container exists; the
    # monitor finds it missing, then the apply makes it. A fresh container holds nothing of a session: no restart.
    name = env.runtime.config.pools["py"].sandboxes[0]
    env.backend.remove(name)
    env.runtime.monitor_once()
    assert (env.runtime.sandbox(name).status, env.runtime.sandbox(name).detail) == ("unhealthy", "container is missing")
    env.backend.recreate(name)
    env.backend.calls.clear()
    env.runtime.monitor_once()
    assert env.runtime.sandbox(name).status == "idle"
    assert [c for c in env.backend.calls if c[1] == name and c[0] in ("stop", "start", "restart")] == []
    assert env.claim("after-missing")["sandbox"] in env.runtime.config.pools["py"].sandboxes
