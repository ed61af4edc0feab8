"""Processes on the fake backend: started at once with an id, output streamed as Server-Sent Events while the
command runs, stdin, wait, kill of the whole group, listing per session, the end with the session, output past
the cap counted, a restart of the runtime, and the audit lines."""

from __future__ import annotations

import json
import os
import time

import httpx
import pytest

from sandstack.runtime.processes import RESTARTED
from tests.runtime.conftest import TOKEN
from tests.runtime.served import serve
from testbed.waiting import wait_until

AUTH = {"Authorization": f"Bearer {TOKEN}"}
LINES = "for i in 1 2 3 4 5; do echo line $i; sleep 0.1; done"


@pytest.fixture
def sandbox(env) -> str:
    return env.claim("chat-1")["sandbox"]


def start(env, sandbox: str, /, **body) -> dict:
    response = env.api.post(f"/v1/sandboxes/{sandbox}/processes", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def get(env, sandbox: str, pid: str) -> dict:
    response = env.api.get(f"/v1/sandboxes/{sandbox}/processes/{pid}")
    assert response.status_code == 200, response.text
    return response.json()


def wait(env, sandbox: str, pid: str, timeout: float = 20) -> dict:
    response = env.api.post(f"/v1/sandboxes/{sandbox}/processes/{pid}/wait", params={"timeout": timeout})
    assert response.status_code == 200, response.text
    return response.json()


def events(lines) -> list[tuple[str, dict]]:
    """(event, data) of an SSE stream's lines."""
    return list(iter_events(lines))


def iter_events(lines):
    kind = None
    for line in lines:
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            yield kind, json.loads(line[6:])


def test_a_start_answers_at_once_with_an_id_and_the_process_runs_on(env, sandbox):
    proc = start(env, sandbox, command=["sleep", "30"])
    # Answered while the command still ran (a start that waited for it would say 'exited' with its exit code),
    # whatever the time the answer took on a busy machine.
    assert env.backend.procs[sandbox][-1].poll() is None
    assert proc["id"].startswith("proc-") and proc["status"] == "running" and proc["exit_code"] is None
    assert proc["command"] == ["sleep", "30"] and proc["session"] == "chat-1"
    assert wait(env, sandbox, proc["id"], timeout=0.2)["status"] == "running"  # the wait's time ran out first


def test_output_is_streamed_line_by_line_while_the_command_runs(env, sandbox):
    # Each line waits for the test to have received the one before: only a stream that delivers a line while
    # the command still runs gets to the end (else the command times out after 20 s with one line).
    gated = "for i in 1 2 3 4 5; do echo line $i; while [ ! -e go$i ]; do sleep 0.01; done; done"
    seen = []
    with serve(env.api.app) as url, httpx.Client(base_url=url, headers=AUTH, timeout=30) as http:
        proc = start(env, sandbox, script=gated, timeout=20)
        with http.stream("GET", f"/v1/sandboxes/{sandbox}/processes/{proc['id']}/output") as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            for kind, data in iter_events(response.iter_lines()):
                status = http.get(f"/v1/sandboxes/{sandbox}/processes/{proc['id']}").json()["status"]
                seen.append((kind, data.get("text"), status))
                if kind == "stdout":
                    env.backend.path(sandbox, f"/workspace/go{data['text'].split()[1]}").touch()
    assert seen[:-1] == [("stdout", f"line {i}\n", "running") for i in range(1, 6)]
    assert seen[-1][0] == "exit" and seen[-1][2] == "exited"


def test_a_follower_reads_on_from_a_position_and_the_exit_event_says_how_it_ended(env, sandbox):
    # Each write waits for the runtime to have recorded the one before (go1, go2), so the log holds 'ab', 'cd' and
    # 'err' as three pieces in that order however slowly its readers ran (with sleeps between the writes instead, a
    # reader late by 0.3 s took 'ab' and 'cd' as one piece, or 'err' before 'cd').
    proc = start(env, sandbox, timeout=60, script="printf 'ab'; until [ -e go1 ]; do sleep 0.01; done; printf 'cd'; "
                                                  "until [ -e go2 ]; do sleep 0.01; done; printf 'err' >&2; exit 3")
    for written, gate in ((2, "go1"), (4, "go2")):
        wait_until(lambda: get(env, sandbox, proc["id"])["stdout_bytes"] == written, 60, interval=0.02,
                   what=f"{written} bytes of stdout")
        env.backend.path(sandbox, f"/workspace/{gate}").touch()
    assert wait(env, sandbox, proc["id"])["exit_code"] == 3
    url = f"/v1/sandboxes/{sandbox}/processes/{proc['id']}/output"
    whole = events(env.api.get(url).text.splitlines())
    assert "".join(d["text"] for k, d in whole if k == "stdout") == "abcd"
    assert [d["text"] for k, d in whole if k == "stderr"] == ["err"]
    assert whole[-1][0] == "exit" and whole[-1][1]["status"] == "exited" and whole[-1][1]["exit_code"] == 3
    rest = events(env.api.get(url, params={"after": 3}).text.splitlines())  # past "abc"
    assert [(k, d.get("text")) for k, d in rest][:-1] == [("stdout", "d"), ("stderr", "err")]
    again = events(env.api.get(url, headers={"Last-Event-ID": "4"}).text.splitlines())
    assert [(k, d.get("text")) for k, d in again][:-1] == [("stderr", "err")]


def test_stdin_round_trip(env, sandbox):
    proc = start(env, sandbox, command=["cat"], stdin=True)
    base = f"/v1/sandboxes/{sandbox}/processes/{proc['id']}"
    assert env.api.post(f"{base}/stdin", content=b"hello\n").status_code == 200
    wait_until(lambda: get(env, sandbox, proc["id"])["stdout_bytes"] >= 6, 60, interval=0.02, what="the echo of stdin")
    assert events(env.api.get(f"{base}/output", params={"follow": False}).text.splitlines()) == \
        [("stdout", {"text": "hello\n"})]
    assert env.api.post(f"{base}/stdin", content=b"bye\n", params={"close": True}).json()["stdin"] is False
    ended = wait(env, sandbox, proc["id"])
    assert (ended["status"], ended["exit_code"], ended["stdout_bytes"]) == ("exited", 0, 10)
    refused = env.api.post(f"{base}/stdin", content=b"more")
    assert (refused.status_code, refused.json()["error"]) == (409, f"the stdin of process {proc['id']!r} is "
                                                                  "closed (exited)")


def test_a_stdin_write_to_a_process_not_reading_answers_at_once_and_the_rest_is_written_as_it_reads(env, sandbox):
    """A write to a process that never read held the request 30 s, then answered 504. Now it answers at once: what
    the pipe takes is written, the rest is held (`stdin_pending`) and written as the process reads; another write
    meanwhile is 409 and takes nothing, so nothing is lost and the order is kept."""
    gate = env.backend.path(sandbox, "/workspace") / "go"
    proc = start(env, sandbox, script="while [ ! -e go ]; do sleep 0.05; done; cat > got.bin", stdin=True)
    base = f"/v1/sandboxes/{sandbox}/processes/{proc['id']}"
    data = bytes(range(256)) * 4096  # 1 MiB, the most one write takes; a pipe holds 64 KiB
    written = env.api.post(f"{base}/stdin", content=data)
    assert written.status_code == 200, written.text
    pending = written.json()["stdin_pending"]
    assert 0 < pending < len(data) and written.json()["stdin"] is True
    refused = env.api.post(f"{base}/stdin", content=b"later")
    assert (refused.status_code, refused.json()) == (409, {
        "error": f"process {proc['id']!r} has not read the last {pending} bytes written to its stdin yet; nothing of "
                 "these 5 bytes was taken: write again when its `stdin_pending` is 0",
        "process": proc["id"], "pending": pending})
    gate.touch()  # it reads now
    wait_until(lambda: get(env, sandbox, proc["id"])["stdin_pending"] == 0, 60, interval=0.02,
               what="the held stdin written")
    assert env.api.post(f"{base}/stdin", content=b"later", params={"close": True}).status_code == 200
    assert (wait(env, sandbox, proc["id"])["exit_code"]) == 0
    assert (env.backend.path(sandbox, "/workspace") / "got.bin").read_bytes() == data + b"later"
    assert env.runtime.processes.stdin.held == 0


def test_the_clients_stdin_write_waits_on_its_side_while_the_runtime_holds_an_earlier_one(env, sandbox):
    from sandstack.client import Client, Conflict
    from tests.runtime.test_client_async import outputs

    gate = env.backend.path(sandbox, "/workspace") / "go"
    with serve(env.api.app) as url, Client.from_outputs(outputs(url)) as client:
        proc = client.sandbox(f"local/{sandbox}").start(
            script="while [ ! -e go ]; do sleep 0.05; done; cat > got.bin", stdin=True)
        proc.write_stdin(b"a" * (1 << 20))
        assert proc.info.stdin_pending > 0
        with pytest.raises(Conflict, match="has not read the last"):
            proc.write_stdin(b"b", timeout=0.2)  # still held after its time: the runtime's 409
        gate.touch()
        proc.write_stdin(b"b")  # taken once the first one was read
        proc.close_stdin()
        assert proc.wait(60).exit_code == 0
    assert (env.backend.path(sandbox, "/workspace") / "got.bin").read_bytes() == b"a" * (1 << 20) + b"b"


def test_stdin_of_a_process_started_without_it_is_409(env, sandbox):
    proc = start(env, sandbox, command=["sleep", "10"])
    response = env.api.post(f"/v1/sandboxes/{sandbox}/processes/{proc['id']}/stdin", content=b"x")
    assert (response.status_code, response.json()["error"]) == (
        409, f"process {proc['id']!r} was started without stdin ('stdin': true keeps it open)")


def test_kill_ends_the_whole_process_group(env, sandbox):
    proc = start(env, sandbox, script="sleep 300 & setsid sleep 300 & sh -c 'sleep 300' & echo up; wait")
    wait_until(lambda: get(env, sandbox, proc["id"])["stdout_bytes"] > 0, 60, interval=0.02, what="'up'")
    killed = env.api.post(f"/v1/sandboxes/{sandbox}/processes/{proc['id']}/kill").json()
    assert (killed["status"], killed["exit_code"]) == ("killed", 137)
    assert killed["message"] == "killed on request: every process it started got SIGKILL"
    probe = ("for d in /proc/[0-9]*; do tr '\\0' '\\n' <$d/environ 2>/dev/null | grep -q '^SANDSTACK_EXEC_ID=' "
             "&& grep -qx 'sleep' $d/comm 2>/dev/null && echo $d; done; true")
    deadline = time.monotonic() + 30  # a busy machine reaps slowly: the cause is asserted, not the time
    while (left := env.api.post(f"/v1/sandboxes/{sandbox}/exec", json={"script": probe}).json()["stdout"]) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == ""


def test_a_background_process_times_out_and_is_killed(env, sandbox):
    proc = start(env, sandbox, command=["sleep", "300"], timeout=1)
    ended = wait(env, sandbox, proc["id"])
    assert (ended["status"], ended["exit_code"]) == ("timed_out", 137)
    assert ended["message"] == "timed out after 1s: every process it started was killed (SIGKILL)"


def test_listing_shows_the_sessions_processes_and_another_sessions_id_is_404(env, sandbox):
    first = start(env, sandbox, command=["sleep", "30"])
    second = start(env, sandbox, command=["true"])
    wait(env, sandbox, second["id"])
    listed = env.api.get(f"/v1/sandboxes/{sandbox}/processes").json()
    assert [(p["id"], p["status"]) for p in listed] == [(first["id"], "running"), (second["id"], "exited")]
    other = env.claim("chat-2")["sandbox"]
    for method, path in (("GET", ""), ("GET", "/output"), ("POST", "/kill"), ("POST", "/wait"), ("POST", "/stdin")):
        response = env.api.request(method, f"/v1/sandboxes/{other}/processes/{first['id']}{path}")
        assert (response.status_code, response.json()["error"]) == (
            404, f"process {first['id']!r} is not in sandbox {other!r}"), path
    assert env.api.get(f"/v1/sandboxes/{other}/processes").json() == []


def test_background_processes_end_with_the_session(env, sandbox):
    proc = start(env, sandbox, command=["sleep", "300"])
    popen = env.backend.procs[sandbox][-1]
    assert env.api.delete("/v1/sessions/chat-1").status_code == 200
    assert popen.poll() is not None  # the reset stopped the container, and the process with it
    assert env.claim("chat-3")["sandbox"] == sandbox  # the first idle one again, reset
    assert env.api.get(f"/v1/sandboxes/{sandbox}/processes/{proc['id']}").status_code == 404
    assert env.runtime.processes._procs == {}


def test_output_past_the_declared_cap_is_counted_not_kept(env, sandbox):
    proc = start(env, sandbox, script="head -c 100 /dev/zero | tr '\\0' a; echo err >&2", output_limit=10)
    ended = wait(env, sandbox, proc["id"])
    assert (ended["stdout_bytes"], ended["stdout_dropped"], ended["stderr_bytes"]) == (10, 90, 4)
    found = events(env.api.get(f"/v1/sandboxes/{sandbox}/processes/{proc['id']}/output").text.splitlines())
    assert "".join(d["text"] for k, d in found if k == "stdout") == "a" * 10
    assert ("truncated", {"stream": "stdout", "kept": 10}) in found
    too_big = env.api.post(f"/v1/sandboxes/{sandbox}/processes", json={"command": ["true"], "output_limit": 65})
    assert (too_big.status_code, too_big.json()["error"]) == (
        422, "'output_limit' 65 must be 1-64 bytes (the pool's session.exec_output_limit)")


def test_a_restarted_runtime_ends_and_reports_the_processes_it_knew(env, sandbox):
    proc = start(env, sandbox, command=["sleep", "300"])
    popen = env.backend.procs[sandbox][-1]
    again = env.restarted()
    popen.wait(timeout=20)  # ended by the new runtime's start
    info = again.api.get(f"/v1/sandboxes/{sandbox}/processes/{proc['id']}").json()
    assert (info["status"], info["message"]) == ("ended", RESTARTED)
    assert [p["id"] for p in again.api.get(f"/v1/sandboxes/{sandbox}/processes").json()] == [proc["id"]]
    output = events(again.api.get(f"/v1/sandboxes/{sandbox}/processes/{proc['id']}/output").text.splitlines())
    assert [kind for kind, _ in output] == ["exit"]


def test_the_audit_log_records_starts_stdin_and_kills_never_their_bytes(env, sandbox):
    proc = start(env, sandbox, command=["cat"], stdin=True, env={"TOKEN": "s3cret-value"})
    env.api.post(f"/v1/sandboxes/{sandbox}/processes/{proc['id']}/stdin", content=b"typed-secret")
    env.api.post(f"/v1/sandboxes/{sandbox}/processes/{proc['id']}/kill")
    lines = env.audit.tail(10)
    assert [(a["operation"], a["status"], a["sandbox"], a["session"]) for a in lines[-3:]] == [
        ("start_process", 201, sandbox, "chat-1"), ("write_stdin", 200, sandbox, "chat-1"),
        ("kill_process", 200, sandbox, "chat-1")]
    text = env.audit.path.read_text()
    assert "typed-secret" not in text and "s3cret-value" not in text


def test_a_blocking_exec_is_not_listed(env, sandbox):
    assert env.api.post(f"/v1/sandboxes/{sandbox}/exec", json={"command": ["true"]}).json()["exit_code"] == 0
    assert env.api.get(f"/v1/sandboxes/{sandbox}/processes").json() == []


def test_a_stdin_write_takes_a_descriptor_past_1023(env, sandbox):
    """select() refuses a descriptor past 1023 (ValueError: an unhandled error in a terminal's handler, seen in a full
    test run): the wait for a writable stdin polls instead, on the Docker backend and the fake alike."""
    import resource
    import socket

    from sandstack.runtime.docker_exec import writable

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 2048:
        pytest.skip(f"this machine allows {hard} open files; the test needs a descriptor past 1023")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard))
    ours, theirs = socket.socketpair()
    try:
        high = 1500
        os.dup2(ours.fileno(), high)
        assert writable(high, 0) is True
        os.close(high)
        fillers = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]  # the process's stdin pipe lands above
        try:
            proc = start(env, sandbox, command=["cat"], stdin=True)
            written = env.api.post(f"/v1/sandboxes/{sandbox}/processes/{proc['id']}/stdin", content=b"hi\n")
            assert written.status_code == 200, written.text
        finally:
            for fd in fillers:
                os.close(fd)
    finally:
        ours.close()
        theirs.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
