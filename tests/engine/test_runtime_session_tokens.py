"""Session tokens and a replaced container on the real engine (issue 37 item 1, issue 36 item 4): a session's token
cannot reach another session of the same pool in any route (exec, processes, terminal upgrade, files, archive,
snapshots, hibernate, the pool's operations); it dies at release and at its lifetime; a restarted runtime still
honours live tokens and refuses released ones. An apply that recreates a bound sandbox's container ends its session
with the cause (the API and the audit log say so) instead of leaving it bound to a new, empty container.
(`urls.auth: session` is not built yet: no URL case here.)"""

from __future__ import annotations

import httpx
import pytest
import yaml

from sandstack.client import Client, Forbidden, NotFound, Sandbox, Unauthorized
from sandstack.plan.runtime import DB_FILE, DEFAULT_STATE_DIR
from testbed.deploy import engine_spec, shared_deployment
from testbed.waiting import wait_until
from tests.engine.runtime_helpers import answers, release_all

pytestmark = pytest.mark.docker

PORT = 17493
TOKEN = "engine-test-runtime-token-sessions-1"
URL = f"http://127.0.0.1:{PORT}"


def _spec(image: str, marker: str = "1") -> str:
    keeper = {"base_image": image, "command": ["sleep", "infinity"], "limits": {"memory": "64MiB"},
              "env": {"GENERATION": marker},  # changed by the second apply: Docker recreates the containers
              "filesystem": {"writable": [{"path": "/tmp", "size": "8MiB"}]},
              "session": {"idle": "never", "workspace": "/tmp"}}
    data = yaml.safe_load(engine_spec(image, {"keeper": keeper},
                                      {"keeper": {"template": "keeper", "hosts": ["local"], "replicas": 2}}))
    data["hosts"]["local"]["runtime"] = {"port": PORT, "token": {"secret": "runtimeToken"}}
    return yaml.safe_dump(data, sort_keys=False)


@pytest.fixture(scope="module")
def stack(debian_image, harness_sweep_orphans, tmp_path_factory):
    with shared_deployment(__file__, tmp_path_factory.mktemp("runtime-session-tokens"), _spec(debian_image),
                           secret_config={"runtimeToken": TOKEN}) as shared:
        yield shared


@pytest.fixture
def client(stack):
    c = Client.from_outputs({"hosts": {"local": {"url": URL, "token": TOKEN}}, "pools": {"keeper": ["local"]}},
                            actor="engine-test")
    yield c
    if answers(PORT):
        release_all(c.host("local"))
    c.close()


def _as(token: str) -> httpx.Client:
    return httpx.Client(base_url=URL, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def test_a_session_token_reaches_its_own_sandbox_and_no_other(client):
    mine, theirs = client.claim("keeper", "s1"), client.claim("keeper", "s2")
    theirs.write_file("secret.txt", "theirs")
    snap = theirs.snapshot()
    process = theirs.start(["sleep", "300"])
    agent = Sandbox.connect(URL, "s1", mine.token, host="local")
    assert agent.exec(["sh", "-c", "echo mine > /tmp/own.txt; cat /tmp/own.txt"]).stdout == "mine\n"
    assert agent.read_file("own.txt") == b"mine\n"
    with _as(mine.token) as http:
        other = theirs.name
        for method, path, body in [
            ("GET", f"/v1/sandboxes/{other}", None), ("POST", f"/v1/sandboxes/{other}/exec", {"command": ["true"]}),
            ("GET", f"/v1/sandboxes/{other}/files/secret.txt", None), ("GET", f"/v1/sandboxes/{other}/archive", None),
            ("GET", f"/v1/sandboxes/{other}/processes", None),
            ("POST", f"/v1/sandboxes/{other}/processes/{process.id}/kill", None),
            ("POST", f"/v1/sandboxes/{other}/snapshots", None),
            ("POST", f"/v1/sandboxes/{other}/restore", {"snapshot": snap.id}),
            ("POST", f"/v1/sandboxes/{other}/pause", None), ("GET", "/v1/sessions/s2", None),
            ("POST", "/v1/sessions/s2/hibernate", None), ("GET", f"/v1/snapshots/{snap.id}", None),
        ]:
            response = http.request(method, path, json=body)
            assert response.status_code == 404, (method, path, response.text)
        for method, path, body in [("POST", "/v1/sessions", {"pool": "keeper", "session": "s3"}),
                                   ("DELETE", "/v1/sessions/s2", None), ("GET", "/v1/sandboxes", None),
                                   ("GET", "/v1/pools", None), ("GET", "/v1/audit", None)]:
            assert http.request(method, path, json=body).status_code == 403, (method, path)
    agent.name = theirs.name
    with pytest.raises(NotFound):
        with agent.terminal(command=["sh"]) as term:
            term.recv(timeout=10)
    assert theirs.read_file("secret.txt") == b"theirs"
    assert theirs.process(process.id).info.status == "running"
    scopes = {line["scope"] for line in client.host("local").audit(50) if line["session"] == "s1"}
    assert "session:host/s1" in scopes and not any(mine.token in str(s) for s in scopes)


def test_it_dies_at_release_and_at_its_lifetime_and_a_restarted_runtime_keeps_the_live_ones(stack, client,
                                                                                         docker_client):
    live, gone = client.claim("keeper", "live"), client.claim("keeper", "gone")
    gone.release()  # two sandboxes in the pool: its sandbox takes the next claim
    short = client.host("local").request("POST", "/v1/sessions", json={"pool": "keeper", "session": "short",
                                                                       "token_lifetime": 2})
    with _as(gone.token) as http:
        assert http.get("/v1/sessions/gone").status_code == 401
    with _as(short["token"]) as http:
        wait_until(lambda: http.get("/v1/sessions/short").status_code == 401, 30, what="the lifetime to pass")
    docker_client.containers.get(stack.name("runtime")).restart(timeout=5)
    wait_until(lambda: answers(PORT), 60, what="the runtime to answer again")
    assert Sandbox.connect(URL, "live", live.token, host="local").exec(["echo", "on"]).stdout == "on\n"
    with pytest.raises(Unauthorized):
        Sandbox.connect(URL, "gone", gone.token, host="local")
    with pytest.raises(Forbidden):
        Sandbox.connect(URL, "live", live.token, host="local").release()


def test_an_apply_that_recreates_a_bound_sandbox_ends_its_session_with_the_cause(stack, client, docker_client,
                                                                                  debian_image):
    sandbox = client.claim("keeper", "kept")
    sandbox.write_file("work.txt", "work")
    first = docker_client.containers.get(sandbox.name).id
    # The monitor records the binding's container at its next pass.
    probe = f"import sqlite3; print(sqlite3.connect('{DEFAULT_STATE_DIR}/{DB_FILE}').execute('select session from " \
            "bindings').fetchall())"
    wait_until(lambda: b"kept" in docker_client.containers.get(stack.name("runtime")).exec_run(
        ["python3", "-c", probe]).output, 60, what="the monitor to record the binding's container")
    stack.deployment.up(_spec(debian_image, marker="2"))
    assert docker_client.containers.get(sandbox.name).id != first  # the apply recreated it
    wait_until(lambda: answers(PORT), 60, what="the runtime to answer")
    host = client.host("local")

    def ended() -> bool:
        try:
            host.get_session("kept")
        except NotFound as error:
            return "has ended: its container was replaced while bound to session 'kept'" in error.message
        return False
    wait_until(ended, 60, what="the runtime to end the session whose container was replaced")
    lines = [line for line in host.audit(200) if line["operation"] == "session ended" and line["session"] == "kept"]
    assert lines and lines[-1]["who"] == "runtime" and "its container was replaced" in lines[-1]["outcome"]
