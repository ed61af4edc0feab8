"""Processes, terminals and the async client on the real engine, through the runtime the components deploy: a
command's lines arrive while it runs, a background server started by one call answers a second command, a kill
ends the whole process group, stdin round-trips, a terminal runs `sh -i` with resize, the sync and async
clients agree, and a restarted runtime ends and reports the processes it knew."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
import yaml

from sandstack.client import AsyncClient, Client
from testbed.deploy import engine_spec, shared_deployment
from testbed.waiting import wait_until
from tests.engine.runtime_helpers import answers, release_all

pytestmark = pytest.mark.docker

PORT = 17530
TOKEN = "engine-test-runtime-token-procs-0123"
OUTPUTS = {"hosts": {"local": {"url": f"http://127.0.0.1:{PORT}", "token": TOKEN}}, "pools": {"agent": ["local"]}}
# The processes of the sandbox's user that carry an exec marker, but for the probe itself.
PROBE = ("for d in /proc/[0-9]*; do [ ${d#/proc/} = $$ ] && continue; tr '\\0' '\\n' <$d/environ 2>/dev/null "
         "| grep -q '^SANDSTACK_EXEC_ID=' && grep -qx sleep $d/comm 2>/dev/null && echo ${d#/proc/}; done; true")


def _spec(image: str) -> str:
    agent = {"base_image": image, "command": ["sleep", "infinity"], "limits": {"memory": "128MiB"},
             "workdir": "/workspace", "filesystem": {"writable": [{"path": "/workspace", "size": "16MiB"},
                                                                  {"path": "/tmp", "size": "8MiB"}]},
             "session": {"idle": "never"}}
    data = yaml.safe_load(engine_spec(image, {"agent": agent},
                                      {"agent": {"template": "agent", "hosts": ["local"], "replicas": 2}}))
    data["hosts"]["local"]["runtime"] = {"port": PORT, "token": {"secret": "runtimeToken"}}
    return yaml.safe_dump(data, sort_keys=False)


@pytest.fixture(scope="module")
def stack(debian_image, harness_sweep_orphans, tmp_path_factory):
    with shared_deployment(__file__, tmp_path_factory.mktemp("runtime-procs"), _spec(debian_image),
                           secret_config={"runtimeToken": TOKEN}) as shared:
        yield shared


@pytest.fixture
def client(stack):
    with Client.from_outputs(OUTPUTS, actor="engine-test") as c:
        yield c
        if answers(PORT):
            release_all(c.host("local"))


def test_a_commands_lines_are_received_one_by_one_while_it_runs(client):
    sandbox = client.claim("agent", "lines")
    # Each line waits for the test to have received the one before (the test touches go<i>): only a stream that
    # delivers a line while the command still runs gets to the end (else the command times out with one line), and
    # the status read at each line is 'running'. Gated, not 100 ms apart: on a busy machine lines written 100 ms
    # apart were read as one chunk, and the test's own calls fell behind the command's end.
    proc = sandbox.start(script="for i in $(seq 1 10); do echo line $i; until [ -e go$i ]; do sleep 0.05; done; done",
                         timeout=120)
    arrivals = []
    for event in proc:
        arrivals.append((event.kind, event.text, sandbox.process(proc.id).info.status))
        if event.kind == "stdout":
            sandbox.exec(["touch", f"go{event.text.split()[-1]}"])
    assert arrivals == [("stdout", f"line {i}\n", "running") for i in range(1, 11)]
    assert (proc.info.status, proc.info.exit_code) == ("exited", 0)


def test_a_background_server_started_in_one_call_answers_a_second_command(client, docker_client):
    sandbox = client.claim("agent", "server")
    server = sandbox.start(["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"])
    sandbox.write_file("index.html", "hello from the sandbox\n")
    fetch = ["python3", "-c", "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8000/index.html',"
                              " timeout=2).read().decode(), end='')"]
    wait_until(lambda: sandbox.exec(fetch).exit_code == 0, 30, what="the server to answer")
    assert sandbox.exec(fetch).stdout == "hello from the sandbox\n"
    assert [p.status for p in sandbox.processes() if p.id == server.id] == ["running"]
    sandbox.release()  # the session's end ends it
    # Docker's top needs the pid column in what ps prints.
    top = docker_client.containers.get(sandbox.name).top(ps_args="-eo pid,args")["Processes"]
    assert not [row for row in top if "http.server" in row[-1]]


def test_kill_ends_the_whole_process_group(client):
    sandbox = client.claim("agent", "kill")
    proc = sandbox.start(script="sleep 1000 & setsid sleep 1000 & (sleep 1000 &) ; echo up; wait")
    next(iter(proc))  # "up": everything has started
    assert len(sandbox.exec(script=PROBE).stdout.split()) == 3
    killed = proc.kill()
    assert (killed.status, killed.exit_code) == ("killed", 137)
    wait_until(lambda: sandbox.exec(script=PROBE).stdout == "", 10, what="every sleep of the group to be gone")


def test_stdin_round_trip(client):
    sandbox = client.claim("agent", "stdin")
    proc = sandbox.start(["python3", "-u", "-c", "import sys\nfor line in sys.stdin: print(line.strip().upper())"],
                         stdin=True)
    events = iter(proc)

    def line() -> str:
        """Events are the chunks as written (print writes the text and its newline apart): up to a newline."""
        text = ""
        while not text.endswith("\n"):
            text += next(events).text
        return text

    proc.write_stdin("hello\n")
    assert line() == "HELLO\n"
    proc.write_stdin("again\n")
    assert line() == "AGAIN\n"
    proc.close_stdin()
    assert list(events) == [] and (proc.info.status, proc.info.exit_code) == ("exited", 0)


def test_a_terminal_runs_sh_interactively_with_resize(client):
    sandbox = client.claim("agent", "tty")
    with sandbox.terminal(rows=24, cols=80, command=["sh", "-i"]) as term:
        term.send("stty size; id -u; pwd; echo done-$((6 * 7))\n")
        seen = term.read_until("done-42\r\n", timeout=20)
        assert seen.endswith(b"24 80\r\n10001\r\n/workspace\r\ndone-42\r\n")  # the sandbox's user, in its workspace
        term.resize(40, 120)
        term.send("stty size\n")
        term.read_until("40 120\r\n", timeout=20)
        term.send("exit 7\n")
        with pytest.raises(EOFError):
            while True:
                term.recv(timeout=20)
    assert term.exit_code == 7


def test_a_terminal_in_command_mode_gives_each_commands_output_and_status_and_cancels_on_request(client):
    # The login shell of the real image (bash), on the runtime's own uvicorn and Docker exec.
    sandbox = client.claim("agent", "tty-commands")
    with sandbox.terminal(mode="command") as term:
        assert (term.run("id -u; pwd")["output"], term.run("ls /nope")["exit_code"]) == ("10001\n/workspace\n", 2)
        waiting = term.submit("echo waiting; sleep 300")
        term.read_until("waiting", timeout=20)
        after = term.run("echo after", cancel=True, timeout=20)
        assert (after["output"], after["exit_code"]) == ("after\n", 0)
        cancelled = term.wait(waiting, timeout=5)
        assert (cancelled["exit_code"], cancelled["cancelled"]) == (130, True)


def test_the_async_and_sync_clients_give_the_same_results(client):
    sandbox = client.claim("agent", "twins")
    script = "echo out; echo err >&2; printf 'partial'; exit 4"
    sync_exec = sandbox.exec(script=script)
    sync_proc = sandbox.start(script=script)
    sync_events = [(e.kind, e.text) for e in sync_proc]

    async def twin():
        async with AsyncClient.from_outputs(OUTPUTS) as aclient:
            box = await aclient.sandbox(sandbox.ref)
            ran = await box.exec(script=script)
            proc = await box.start(script=script)
            events = [(e.kind, e.text) async for e in proc]
            return ran, events, proc.info, await box.status()

    async_exec, async_events, async_info, async_status = asyncio.run(twin())
    assert (async_exec.stdout, async_exec.stderr, async_exec.exit_code) == \
        (sync_exec.stdout, sync_exec.stderr, sync_exec.exit_code) == ("out\npartial", "err\n", 4)
    # Events are chunks as the pipes gave them, which may cut and interleave differently: each stream's text agrees.
    for kind in ("stdout", "stderr"):
        assert "".join(t for k, t in async_events if k == kind) == "".join(t for k, t in sync_events if k == kind)
    assert "".join(t for k, t in sync_events if k == "stdout") == "out\npartial"
    assert (async_info.status, async_info.exit_code) == (sync_proc.info.status, sync_proc.info.exit_code)
    # The same status from both, but for the idle clock (seconds since the last call, which moved between the two).
    sync_status = sandbox.status()
    assert replace(async_status, idle_seconds=None) == replace(sync_status, idle_seconds=None)
    assert async_status.idle_seconds is not None and sync_status.idle_seconds is not None


def test_a_restarted_runtime_ends_and_reports_the_processes_it_knew(stack, client, docker_client):
    sandbox = client.claim("agent", "restart")
    proc = sandbox.start(["sleep", "1000"])
    assert sandbox.exec(script=PROBE).stdout.strip() != ""
    docker_client.containers.get(stack.name("runtime")).restart(timeout=5)
    wait_until(lambda: answers(PORT), 60, what="the runtime to answer again")
    info = sandbox.process(proc.id).info
    assert info.status == "ended" and info.message.startswith("the runtime restarted while it ran: it was ended")
    assert sandbox.exec(script=PROBE).stdout == ""
