"""What API fuzzing and attacks from inside sandboxes found (issue 19, 'Guard and API'): inputs that gave a 500
or broke the audit log, races that ended a session, a monitor pass one sandbox could stop, and names that were
listed but unreachable."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from tests.runtime.conftest import PY, hk
from testbed.waiting import wait_until

NOT_UNICODE = ("is not valid Unicode text: it holds a lone surrogate (a \\ud800-\\udfff escape without its pair), "
               "which no file, argv or log can carry")


@pytest.fixture
def sandbox(env) -> str:
    return env.claim("chat-1")["sandbox"]


def raw_json(env, url: str, body: str):
    return env.api.post(url, content=body.encode(), headers={"content-type": "application/json"})


def test_a_lone_surrogate_in_a_body_is_422_and_the_audit_log_still_reads(env, sandbox):
    claim = raw_json(env, "/v1/sessions", '{"pool":"py","session":"\\ud800"}')
    assert (claim.status_code, claim.json()) == (422, {"error": f"invalid request: body.session: {NOT_UNICODE}"})
    script = raw_json(env, f"/v1/sandboxes/{sandbox}/exec", '{"script":"echo \\udfff"}')
    assert (script.status_code, script.json()) == (422, {"error": f"invalid request: body.script: {NOT_UNICODE}"})
    audit = env.api.get("/v1/audit", params={"limit": 2})
    assert audit.status_code == 200
    assert [(line["operation"], line["status"]) for line in audit.json()] == [("claim", 422), ("exec", 422)]


def test_any_string_round_trips_through_the_audit_log(env):
    env.audit.record(who="x", operation="claim", outcome="odd \ud800 \n \u00e9 \x00", status=422, session="\udfff")
    line = (env.state_dir / "audit.log").read_bytes().splitlines()[-1]
    assert line.isascii()
    response = env.api.get("/v1/audit", params={"limit": 2})
    assert response.status_code == 200
    assert response.content.isascii()
    first = json.loads(response.content)[0]
    assert (first["outcome"], first["session"]) == ("odd \ud800 \n \u00e9 \x00", "\udfff")


def test_a_bad_audit_line_is_left_out_and_the_rest_is_read(env):
    env.audit.record(who="a", operation="claim", outcome="ok", status=201)
    with open(env.state_dir / "audit.log", "ab") as log:
        log.write(b'{"torn": \xff\n[1, 2]\n{"time": 1, "who": "b"}\n')
    env.audit.record(who="c", operation="claim", outcome="ok", status=201)
    response = env.api.get("/v1/audit", params={"limit": 3})
    assert response.status_code == 200
    assert [line["who"] for line in response.json()] == ["a", "c"]  # the three lines between: not audit lines


def test_a_file_the_sandbox_cannot_read_is_listed_with_its_size_and_reading_it_is_403(env, sandbox):
    secret = env.backend.path(sandbox, "/workspace/locked.txt")
    secret.write_bytes(b"12345")
    secret.chmod(0)
    env.backend.path(sandbox, "/workspace/closed").mkdir(mode=0)
    listing = env.api.get(f"/v1/sandboxes/{sandbox}/files/")
    assert (listing.status_code, listing.json()) == (200, {"path": "", "entries": [
        {"name": "closed", "type": "dir", "size": 0, "mode": "0000"},
        {"name": "locked.txt", "type": "file", "size": 5, "mode": "0000"}]})
    for path in ("locked.txt", "closed"):
        read = env.api.get(f"/v1/sandboxes/{sandbox}/files/{path}")
        assert (read.status_code, read.json()) == (403, {
            "error": f"path {path!r} is not readable by the sandbox's user (its mode forbids it)", "path": path})


@pytest.mark.parametrize("name", ["a\nb", "trailing\n", "dir\n/inner", "\n"])
def test_names_with_newlines_are_listed_and_reachable(env, sandbox, name):
    url = f"/v1/sandboxes/{sandbox}/files/{name.replace(chr(10), '%0A')}"
    assert env.api.put(url, content=b"x").status_code == 204
    top = name.split("/")[0]
    assert [e["name"] for e in env.api.get(f"/v1/sandboxes/{sandbox}/files/").json()["entries"]] == [top]
    assert (env.api.get(url).status_code, env.api.get(url).content) == (200, b"x")
    assert env.backend.path(sandbox, "/workspace/" + name).read_bytes() == b"x"
    assert env.api.delete(url).status_code == 204
    assert not env.backend.path(sandbox, "/workspace/" + name).exists()


def test_pause_while_an_exec_runs_is_409_and_the_session_keeps_its_sandbox(env, sandbox):
    # The exec runs until the test lets it end (after the pause): with a `sleep 1` instead, a busy machine could
    # answer the pause after the exec had ended, and the pause rightly went through.
    result = {}
    gated = "until [ -e go ]; do sleep 0.01; done"
    worker = threading.Thread(target=lambda: result.update(
        exec=env.api.post(f"/v1/sandboxes/{sandbox}/exec", json={"script": gated, "timeout": 60})))
    worker.start()
    wait_until(lambda: env.runtime.leases.in_use(sandbox), 60, interval=0.01, what="the exec to hold the sandbox")
    pause = env.api.post(f"/v1/sandboxes/{sandbox}/pause")
    env.backend.path(sandbox, "/workspace/go").touch()
    worker.join()
    assert (pause.status_code, pause.json()) == (409, {
        "error": f"sandbox {sandbox!r} is busy: an exec or a file, archive, snapshot or restore is running in it; "
                 "pause it when that has finished", "sandbox": sandbox, "status": "bound"})
    assert (result["exec"].status_code, result["exec"].json()["exit_code"]) == (200, 0)
    row = env.runtime.sandbox(sandbox)
    assert (row.status, row.session, env.backend.status[sandbox]) == ("bound", hk("chat-1"), "running")
    assert env.api.post(f"/v1/sandboxes/{sandbox}/pause").json()["status"] == "paused"


def test_a_snapshot_while_a_pause_is_under_way_is_409(env, sandbox):
    env.runtime.leases.pausing.add(sandbox)  # the window between a pause's check and Docker's answer
    try:
        response = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots")
    finally:
        env.runtime.leases.pausing.discard(sandbox)
    assert (response.status_code, response.json()["error"]) == (
        409, f"sandbox {sandbox!r} is being paused; resume it, then try again")
    assert env.runtime.sandbox(sandbox).session == hk("chat-1")


def test_the_idle_pause_leaves_a_sandbox_an_exec_just_started_in_bound(env, sandbox):
    since = env.runtime.sandbox(sandbox).last_activity
    env.runtime.monitor_once(now=since + 1)  # first CPU sample
    with env.runtime.leases.use(sandbox):  # an exec that began after the pass looked
        env.runtime.leases.in_use = lambda name: False
        env.runtime.monitor_once(now=since + 60)
    row = env.runtime.sandbox(sandbox)
    assert (row.status, row.session, row.detail, env.backend.status[sandbox]) == ("bound", hk("chat-1"), None, "running")


def test_an_exec_finding_the_container_paused_outside_the_api_is_409_and_keeps_the_session(env, sandbox):
    env.backend.pause(sandbox)  # `docker pause` by hand: the runtime's state still says bound
    response = env.api.post(f"/v1/sandboxes/{sandbox}/exec", json={"command": ["true"]})
    assert (response.status_code, response.json()["error"]) == (
        409, f"sandbox {sandbox!r} is paused; resume it first (POST /v1/sandboxes/{sandbox}/resume)")
    row = env.runtime.sandbox(sandbox)
    assert (row.status, row.session) == ("bound", hk("chat-1"))


def test_one_sandboxs_unexpected_error_does_not_stop_the_monitor_pass(env):
    broken = env.claim("chat-2")["sandbox"]
    assert (broken, env.claim("chat-3")["sandbox"]) == (PY[0], PY[1])
    env.backend.die(PY[1])
    env.runtime.store.update(broken, status="resetting", session=None)
    real_start = env.backend.start

    def start(name):
        if name == broken:
            raise RuntimeError("an unexpected bug")
        real_start(name)

    env.backend.start = start
    env.runtime.monitor_once()
    row = env.runtime.sandbox(broken)
    assert (row.status, row.detail) == ("unhealthy", "the monitor failed on it (RuntimeError; see the runtime's "
                                                     "log); it is reset again at the next pass")
    assert env.runtime.sandbox(PY[1]).detail == "container is exited (exit 137) while bound to session 'chat-3'"
    env.backend.start = real_start
    env.runtime.monitor_once()
    assert env.runtime.sandbox(broken).status == "idle"


def test_a_client_leaving_mid_upload_is_audited_as_499_not_500(env, sandbox):
    messages = [{"type": "http.request", "body": b"x" * 10, "more_body": True}, {"type": "http.disconnect"}]
    sent = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "PUT", "scheme": "http",
             "path": f"/v1/sandboxes/{sandbox}/files/up.bin", "raw_path": f"/v1/sandboxes/{sandbox}/files/up.bin".encode(),
             "query_string": b"", "root_path": "", "client": ("127.0.0.1", 5000), "server": ("testserver", 80),
             "headers": [(b"authorization", f"Bearer {env.api.headers['authorization'].split()[1]}".encode()),
                         (b"content-type", b"application/octet-stream")]}
    asyncio.run(env.api.app(scope, receive, send))
    assert sent[0]["status"] == 499  # nobody reads it
    line = env.api.get("/v1/audit", params={"limit": 1}).json()[0]
    assert (line["operation"], line["status"], line["outcome"]) == (
        "write_file", 499, "client closed the request before its body was complete")
    assert not env.backend.path(sandbox, "/workspace/up.bin").exists()


@pytest.mark.parametrize("body, stdout, exit_code", [
    ({"command": ["no-such-command"]}, 'OCI runtime exec failed: exec failed: unable to start container process: '
                                       'exec: "no-such-command": executable file not found in $PATH: unknown\r\n', 127),
    ({"command": ["true"], "cwd": "/nowhere"}, 'OCI runtime exec failed: exec failed: unable to start container '
                                               'process: chdir to cwd ("/nowhere") set in config.json failed: no such '
                                               'file or directory: unknown\r\n', 126),
])
def test_a_command_that_cannot_start_is_an_exec_result_as_docker_answers_it(tmp_path, body, stdout, exit_code):
    from tests.runtime.conftest import make_config, make_env

    env = make_env(tmp_path, make_config(output_limit_bytes=4096))
    try:
        name = env.claim("chat-1")["sandbox"]
        response = env.api.post(f"/v1/sandboxes/{name}/exec", json=body)
        assert response.status_code == 200, response.text
        assert (response.json()["stdout"], response.json()["exit_code"]) == (stdout, exit_code)
        assert env.runtime.sandbox(name).session == hk("chat-1")
    finally:
        env.backend.close()
        env.audit.close()
