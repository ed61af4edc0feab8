"""The exec limits a template declares (`session.exec_max_timeout`, `exec_output_limit`), enforced per pool."""

from __future__ import annotations

from dataclasses import replace

from tests.runtime.conftest import make_config, make_env


def limited_env(tmp_path, max_timeout: int, output: int):
    config = make_config()
    pools = dict(config.pools)
    pools["web"] = replace(pools["web"], exec_max_timeout_seconds=max_timeout, output_limit_bytes=output)
    return make_env(tmp_path, replace(config, pools=pools))


def test_each_pool_has_its_own_timeout_bound_and_a_longer_one_is_422_running_nothing(tmp_path):
    env = limited_env(tmp_path, max_timeout=86400, output=1024)
    try:
        web, py = env.claim("w", pool="web")["sandbox"], env.claim("p")["sandbox"]
        ok = env.api.post(f"/v1/sandboxes/{web}/exec", json={"command": ["true"], "timeout": 86400})
        assert (ok.status_code, ok.json()["exit_code"]) == (200, 0)
        marker = env.backend.path(py, "/tmp") / "ran"
        refused = env.api.post(f"/v1/sandboxes/{py}/exec",
                               json={"command": ["touch", "/tmp/ran"], "timeout": 3601})
        assert (refused.status_code, refused.json()) == (422, {
            "error": "'timeout' 3601 must be 1-3600 seconds (the pool's session.exec_max_timeout)",
            "timeout": 3601, "limit": 3600})
        assert not marker.exists()
        too_long = env.api.post(f"/v1/sandboxes/{web}/exec", json={"command": ["true"], "timeout": 86401})
        assert too_long.json()["error"] == ("'timeout' 86401 must be 1-86400 seconds (the pool's "
                                            "session.exec_max_timeout)")
    finally:
        env.backend.close()
        env.audit.close()


def test_a_pool_below_the_default_timeout_runs_a_timeout_less_exec_at_its_bound(tmp_path):
    env = limited_env(tmp_path, max_timeout=1, output=1024)
    try:
        web = env.claim("w", pool="web")["sandbox"]
        result = env.api.post(f"/v1/sandboxes/{web}/exec", json={"command": ["sleep", "5"]}).json()
        assert (result["timed_out"], result["exit_code"]) == (True, 137)
        assert result["message"].startswith("timed out after 1s")
    finally:
        env.backend.close()
        env.audit.close()


def test_each_pool_keeps_its_own_output_limit(tmp_path):
    env = limited_env(tmp_path, max_timeout=60, output=1000)
    try:
        web, py = env.claim("w", pool="web")["sandbox"], env.claim("p")["sandbox"]
        body = {"script": "head -c 1500 /dev/zero | tr '\\0' x"}
        big = env.api.post(f"/v1/sandboxes/{web}/exec", json=body).json()
        assert big["stdout"] == "x" * 1000 + "\n[sandstack: stdout truncated: 500 bytes dropped after the first 1000]"
        small = env.api.post(f"/v1/sandboxes/{py}/exec", json=body).json()  # the conftest's pools keep 64
        assert small["stdout"].startswith("x" * 64 + "\n[sandstack: stdout truncated: 1436 bytes dropped")
    finally:
        env.backend.close()
        env.audit.close()
