"""What one session leaves is absent for the next, on the real engine: run-scoped credentials reach the session's
execs and nothing of them is left for the next session (no process, no environment, no file); per-session
snapshots keep the session's newest and restore its files. (A writable root needs a host with `storage_quota`,
which this project's engine does not have: its reset is tested on the fake backend, tests/runtime.)"""

from __future__ import annotations

import pytest
import yaml

from sandstack.client import Client
from testbed.deploy import engine_spec, shared_deployment
from tests.engine.runtime_helpers import release_all

pytestmark = pytest.mark.docker

PORT = 17491
TOKEN = "engine-test-runtime-token-isolation-1"
SECRET = "run-scoped-" + "4d2c" * 6


def _spec(image: str) -> str:
    base = {"base_image": image, "command": ["sleep", "infinity"], "limits": {"memory": "64MiB", "disk": "256MiB"}}
    templates = {
        "keeper": {**base, "filesystem": {"writable": [{"path": "/tmp", "size": "8MiB"}]},
                   "session": {"idle": "never", "workspace": "/tmp", "session_snapshots": 1}},
    }
    data = yaml.safe_load(engine_spec(image, templates, {name: {"template": name, "hosts": ["local"], "replicas": 1}
                                                        for name in templates}))
    data["hosts"]["local"]["runtime"] = {"port": PORT, "token": {"secret": "runtimeToken"}}
    return yaml.safe_dump(data, sort_keys=False)


@pytest.fixture(scope="module")
def stack(debian_image, harness_sweep_orphans, tmp_path_factory):
    with shared_deployment(__file__, tmp_path_factory.mktemp("runtime-isolation"), _spec(debian_image),
                           secret_config={"runtimeToken": TOKEN}) as shared:
        yield shared


@pytest.fixture
def host(stack):
    c = Client.from_outputs({"hosts": {"local": {"url": f"http://127.0.0.1:{PORT}", "token": TOKEN}},
                             "pools": {"keeper": ["local"]}}, actor="engine-test")
    yield c.host("local")
    release_all(c.host("local"))
    c.close()


def _sh(host, sandbox: str, script: str) -> str:
    out = host.exec(sandbox, command=["sh", "-c", script])
    assert out["exit_code"] == 0, out
    return out["stdout"]


def test_run_scoped_credentials_reach_the_sessions_execs_and_nothing_is_left_for_the_next(host):
    claimed = host.request("POST", "/v1/sessions", json={"pool": "keeper", "session": "with-secret",
                                                         "secrets": {"env": {"API_TOKEN": SECRET}}})
    sandbox = claimed["sandbox"]
    assert _sh(host, sandbox, 'printf %s "$API_TOKEN"') == SECRET
    # A process of the session that holds it in its environment, and a file it wrote with it.
    _sh(host, sandbox, '(nohup sleep 1000 >/dev/null 2>&1 &) ; printf %s "$API_TOKEN" > /tmp/copy')
    audit = host.request("GET", "/v1/audit", params={"limit": 50})
    assert SECRET not in str(audit)
    assert [line["secrets"] for line in audit if line["operation"] == "claim"][-1] == ["API_TOKEN"]
    host.release("with-secret")
    after = host.claim("keeper", "after")["sandbox"]
    assert after == sandbox
    left = _sh(host, after, 'printf "%s|" "${API_TOKEN-unset}"; ls -A /tmp; '
                            f'grep -l {SECRET} /proc/[0-9]*/environ 2>/dev/null; pgrep -f "sleep 100[0]"; echo end')
    assert left == "unset|end\n"


def test_per_session_snapshots_keep_the_newest_and_restore_the_sessions_files(host):
    sandbox = host.claim("keeper", "snapper")["sandbox"]
    _sh(host, sandbox, "echo v1 > /tmp/notes")
    first = host.snapshot(sandbox)["id"]
    _sh(host, sandbox, "echo v2 > /tmp/notes")
    second = host.snapshot(sandbox)["id"]  # session_snapshots 1: the first goes
    assert [s["id"] for s in host.snapshots(session="snapper")] == [second]
    _sh(host, sandbox, "echo v3 > /tmp/notes")
    host.restore(sandbox, second)
    assert _sh(host, sandbox, "cat /tmp/notes") == "v2\n"
    assert first not in [s["id"] for s in host.snapshots()]
    host.request("DELETE", f"/v1/snapshots/{second}", expect="response")
