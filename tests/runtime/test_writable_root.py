"""A template with a writable root (`read_only_root: false`): every reset gives it its image's root again."""

from __future__ import annotations

from dataclasses import replace

from sandstack.runtime.backend import BackendError
from tests.runtime.conftest import make_config, make_env


def root_env(tmp_path):
    config = make_config()
    pools = dict(config.pools)
    pools["web"] = replace(pools["web"], writable_root=True)
    return make_env(tmp_path, replace(config, pools=pools))


def test_a_release_resets_the_root_and_the_next_session_sees_nothing_installed(tmp_path):
    env = root_env(tmp_path)
    try:
        name = env.claim("s1", pool="web")["sandbox"]
        installed = env.backend.path(name, "/usr/local/bin/tool")
        installed.parent.mkdir(parents=True)
        installed.write_text("what s1 installed")
        assert env.api.delete("/v1/sessions/s1").status_code == 200
        assert not installed.exists() and not installed.parent.exists()
        assert ("reset-root", name) in env.backend.calls
        # Stopped before the reset, started after it.
        calls = [op for op, sandbox in env.backend.calls if sandbox == name]
        assert calls[calls.index("reset-root") - 1:calls.index("reset-root") + 2] == ["stop", "reset-root", "start"]
        assert env.claim("s2", pool="web")["sandbox"] == name
    finally:
        env.backend.close()
        env.audit.close()


def test_a_read_only_root_pool_is_never_asked_to(env):
    env.claim("s1")
    assert env.api.delete("/v1/sessions/s1").status_code == 200
    assert not [op for op, _ in env.backend.calls if op == "reset-root"]


def test_a_root_that_cannot_be_reset_quarantines_the_sandbox(tmp_path):
    env = root_env(tmp_path)
    try:
        name = env.claim("s1", pool="web")["sandbox"]

        def fails(sandbox: str) -> None:
            raise BackendError(f"container {sandbox!r} has a writable root on storage 'overlayfs', whose changes "
                               "the runtime cannot reset (it needs overlay2's upper directory)")

        env.backend.reset_root = fails
        answer = env.api.delete("/v1/sessions/s1").json()
        assert (answer["status"], answer["detail"]) == ("quarantined", (
            f"reset failed, retried by the monitor: container {name!r} has a writable root on storage 'overlayfs', "
            "whose changes the runtime cannot reset (it needs overlay2's upper directory)"))
        refused = env.api.post("/v1/sessions", json={"pool": "web", "session": "s2"})
        assert refused.status_code == 503
    finally:
        env.backend.close()
        env.audit.close()


def test_the_upper_directory_comes_from_overlay2_only():
    from sandstack.runtime.rootfs import upper_dir

    info = {"Name": "/sbx-0", "GraphDriver": {"Name": "overlay2", "Data": {"UpperDir": "/var/lib/docker/x/diff"}}}
    assert upper_dir(info) == "/var/lib/docker/x/diff"
    try:
        upper_dir({"Name": "/sbx-0", "GraphDriver": {"Name": "overlayfs", "Data": None}})
    except BackendError as error:
        assert str(error) == ("container 'sbx-0' has a writable root on storage 'overlayfs', whose changes the "
                              "runtime cannot reset (it needs overlay2's upper directory)")
    else:
        raise AssertionError("no error")
