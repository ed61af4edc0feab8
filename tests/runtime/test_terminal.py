"""Terminals over the WebSocket on the fake backend (a real pseudo-terminal): an interactive shell with resize,
in the workspace, its exit code, what it started killed when it closes, refusals as typed errors, audit lines
without input or output, and the async form."""

from __future__ import annotations

import asyncio
import time

import pytest

from sandstack.client import AsyncClient, Client, Conflict, InvalidRequest, NotFound, Unauthorized
from sandstack.runtime.processes import MAX_RUNNING
from tests.runtime.conftest import TOKEN
from tests.runtime.served import serve
from tests.runtime.test_client_async import outputs


@pytest.fixture
def url(env):
    with serve(env.api.app) as base:
        yield base


def test_a_terminal_runs_an_interactive_shell_with_resize_in_the_workspace(env, url):
    with Client.from_outputs(outputs(url)) as client:
        sandbox = client.claim("py", "term-1")
        with sandbox.terminal(rows=24, cols=80, command=["sh", "-i"]) as term:
            term.send("stty size; basename \"$(pwd -P)\"; [ -t 0 ] && echo is-$((6 * 7))-tty\n")
            assert term.read_until("is-42-tty\r\n").endswith(b"24 80\r\nworkspace\r\nis-42-tty\r\n")
            term.resize(30, 100)
            term.send("stty size\n")
            term.read_until("30 100\r\n")
            term.send("exit 3\n")
            with pytest.raises(EOFError):
                while True:
                    term.recv(timeout=10)
            assert term.exit_code == 3


def test_closing_a_terminal_kills_what_it_started(env, url):
    with Client.from_outputs(outputs(url)) as client:
        sandbox = client.claim("py", "term-2")
        with sandbox.terminal(command=["sh", "-i"]) as term:
            term.send("sleep 300 & echo started-$((6 * 7))\n")
            term.read_until("started-42")
        probe = ("for d in /proc/[0-9]*; do tr '\\0' '\\n' <$d/environ 2>/dev/null | grep -q '^SANDSTACK_EXEC_ID=' "
                 "&& grep -qx 'sleep' $d/comm 2>/dev/null && echo $d; done; true")
        deadline = time.monotonic() + 60  # killed at once, reaped when the machine gets to it: a bound on waiting
        while (left := sandbox.exec(script=probe).stdout) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert left == ""


def test_terminal_refusals_are_typed_errors_and_a_plain_get_is_426(env, url):
    with Client.from_outputs(outputs(url)) as client:
        sandbox = client.claim("py", "term-3")
        sandbox.name = "nope"
        with pytest.raises(NotFound, match="sandbox 'nope' is not on host 'local'"):
            with sandbox.terminal() as term:
                term.recv(timeout=10)
    with Client.from_outputs(outputs(url, token="wrong-token-0123456789")) as bad:
        sandbox = Client.from_outputs(outputs(url)).claim("py", "term-3")
        sandbox.host = bad.host("local")
        with pytest.raises(Unauthorized):
            with sandbox.terminal() as term:
                term.recv(timeout=10)
    response = env.api.get("/v1/sandboxes/x/terminal")
    assert (response.status_code, response.json()["error"]) == (
        426, "open this path as a WebSocket (Upgrade: websocket): it is a terminal")


def test_the_audit_log_records_a_terminal_never_what_was_typed(env, url):
    with Client.from_outputs(outputs(url), actor="agent-7") as client:
        sandbox = client.claim("py", "term-4")
        with sandbox.terminal(command=["sh", "-i"]) as term:
            term.send("echo typed-secret-$((6 * 7))\n")
            term.read_until("typed-secret-42\r\n")
            term.send("exit\n")
            with pytest.raises(EOFError):
                while True:
                    term.recv(timeout=10)
    # The closing line is written as the server's handler ends, after the client saw the end: wait for it (a fixed
    # 0.2 s was not always enough on a busy machine), then the lines must be exactly these.
    deadline = time.monotonic() + 60
    while len(lines := [a for a in env.audit.tail(20) if a["operation"] == "terminal"]) < 2 \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [(a["outcome"], a["status"], a["session"], a["who"].split("@")[0]) for a in lines] == [
        ("terminal opened", 101, "term-4", "agent-7"), ("terminal closed (exit 0)", 200, "term-4", "agent-7")]
    assert "typed-secret" not in env.audit.path.read_text()


def test_the_async_terminal(env, url):
    async def session():
        async with AsyncClient.from_outputs(outputs(url)) as client:
            sandbox = await client.claim("py", "term-5")
            async with sandbox.terminal(rows=10, cols=40, command=["sh", "-i"]) as term:
                await term.send("stty size\n")
                await term.read_until("10 40\r\n")
                await term.resize(11, 41)
                await term.send("stty size\n")
                return await term.read_until("11 41\r\n")
    assert asyncio.run(session()).endswith(b"11 41\r\n")


@pytest.mark.parametrize("rows, shown", [("Infinity", "inf"), ("1000000", "1000000"), ("-1", "-1"),
                                         ("65536", "65536"), ("0", "0"), ("24.5", "24.5"), ("true", "true"),
                                         ('"24"', '"24"'), ("null", "null")])
def test_a_resize_out_of_bounds_is_answered_with_an_error_and_the_terminal_keeps_its_size(env, url, rows, shown):
    """`rows: Infinity` raised an unhandled error in the handler (int(inf)); 10^6, -1 and 65536 failed in the
    TTY's ioctl. Each is refused with an error message, and the terminal goes on at its size."""
    with Client.from_outputs(outputs(url)) as client:
        sandbox = client.claim("py", "term-6")
        with sandbox.terminal(rows=24, cols=80, command=["sh", "-i"]) as term:
            term._ws.send_text('{"type": "resize", "rows": %s, "cols": 80}' % rows)
            term.send("stty size\n")
            term.read_until("24 80\r\n")
            assert term.screen.errors == [
                f"resize: rows {shown} is not an integer 1-1000; the terminal keeps its size"]
            term.resize(30, 100)
            term.send("stty size\n")
            term.read_until("30 100\r\n")


@pytest.mark.parametrize("query, message", [
    ({"rows": "0"}, "query rows '0' is not an integer 1-1000"),
    ({"rows": "abc"}, "query rows 'abc' is not an integer 1-1000"),
    ({"cols": "65536"}, "query cols '65536' is not an integer 1-1000"),
    ({"cols": "-1"}, "query cols '-1' is not an integer 1-1000"),
])
def test_a_bad_query_value_closes_with_4422_and_the_message_not_a_bare_403(env, url, query, message):
    from httpx_ws import WebSocketDisconnect, connect_ws
    import httpx

    sandbox = env.claim("term-7")["sandbox"]
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        with pytest.raises(WebSocketDisconnect) as closed:
            with connect_ws(f"/v1/sandboxes/{sandbox}/terminal", http, params=query) as ws:
                ws.receive(timeout=10)
    assert (closed.value.code, closed.value.reason) == (4422, message)
    with Client.from_outputs(outputs(url)) as client:  # the client raises it as the same request's 422
        with pytest.raises(InvalidRequest, match="is not an integer 1-1000"):
            with client.claim("py", "term-7").terminal(rows=0) as term:
                term.recv(timeout=10)


def test_terminals_count_toward_the_sandboxs_processes(env, url):
    """60 terminals opened on one sandbox held some 187 server threads: a terminal is a process of the sandbox
    (MAX_RUNNING), counted while it is open, and freed when it closes."""
    with Client.from_outputs(outputs(url)) as client:
        sandbox = client.claim("py", "term-8")
        for _ in range(MAX_RUNNING - 2):
            sandbox.start(["sleep", "300"])
        with sandbox.terminal(command=["sh", "-i"]) as first, sandbox.terminal(command=["sh", "-i"]) as second:
            for term in (first, second):
                term.send("echo up-$((6 * 7))\n")
                term.read_until("up-42", timeout=60)  # 30 processes and two shells starting on a busy machine
            with pytest.raises(Conflict, match=f"already runs {MAX_RUNNING} processes \\(its open terminals "
                                               "included\\); wait for, kill or close one first"):
                with sandbox.terminal(command=["sh", "-i"]) as third:
                    third.recv(timeout=10)
            with pytest.raises(Conflict, match=f"already runs {MAX_RUNNING} processes"):
                sandbox.start(["sleep", "300"])
        # Closed: counted no more once the server's handler has ended them (a bound on waiting for it).
        deadline = time.monotonic() + 60
        while env.runtime.processes._unlisted and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sandbox.start(["sleep", "300"]).info.status == "running"


def test_a_terminal_without_input_or_output_for_the_pools_terminal_idle_is_closed_with_4408(env, url):
    from dataclasses import replace

    from sandstack.client import SandstackError

    config = env.runtime.config
    env.runtime.reconfigure(replace(config, pools={**config.pools, "py": replace(config.pools["py"],
                                                                                 terminal_idle_seconds=1)}), "idle-1")
    with Client.from_outputs(outputs(url)) as client:
        sandbox = client.claim("py", "term-idle")
        with sandbox.terminal(command=["sh", "-i"]) as term:
            # Output keeps it open: a line every 0.4 s for 2 s, past the 1 s bound.
            term.send("for i in 1 2 3 4 5; do sleep 0.4; echo tick-$i; done; echo done-$((6 * 7))\n")
            term.read_until("done-42", timeout=30)
            started = time.monotonic()
            with pytest.raises(SandstackError) as closed:
                while True:
                    term.recv(timeout=30)
            assert time.monotonic() - started >= 0.9  # not before the bound
        assert (closed.value.status, closed.value.message) == (
            408, "closed after 1 s without input or output (session.terminal_idle)")
        line = [line for line in env.audit.tail(20) if line["operation"] == "terminal"][-1]
        assert (line["status"], line["outcome"]) == (408, closed.value.message)
        # Its slot is free again: the sandbox's processes do not count it.
        assert sandbox.exec(script="echo ok").stdout == "ok\n"


def test_command_mode_returns_each_commands_output_and_exit_status_apart(env, url):
    with Client.from_outputs(outputs(url)) as client:
        sandbox = client.claim("py", "term-cmd")
        with sandbox.terminal(command=["sh", "-i"], mode="command") as term:
            first = term.run("echo one; echo two >&2")
            assert (first["id"], first["output"], first["exit_code"], first["cancelled"]) == (1, "one\ntwo\n", 0, False)
            assert term.run("printf 'no newline'; exit_with() { return $1; }; exit_with 7") | {"id": 0} == {
                "type": "result", "id": 0, "output": "no newline", "exit_code": 7, "truncated": False,
                "cancelled": False}
            assert term.run("cd /tmp && pwd")["output"] == "/tmp\n"
            assert term.run("pwd")["output"] == "/tmp\n"  # one shell: its state carries from command to command
            # A command that never ends, cancelled by the next one (Ctrl-C first).
            waiting = term.submit("echo waiting; sleep 300")
            term.read_until("waiting")
            after = term.run("echo after", cancel=True)
            assert (after["output"], after["exit_code"]) == ("after\n", 0)
            cancelled = term.wait(waiting, timeout=10)
            assert (cancelled["output"], cancelled["exit_code"], cancelled["cancelled"]) == ("waiting\n", 130, True)
            # A bad run message is refused and runs nothing.
            with pytest.raises(InvalidRequest, match="command must not hold Ctrl-C"):
                term.run("echo \x03")
            assert term.run("echo still")["output"] == "still\n"


def test_a_cancel_whose_ctrl_c_interrupts_nothing_types_it_again(env, url):
    with Client.from_outputs(outputs(url)) as client:
        sandbox = client.claim("py", "term-cancel-again")
        with sandbox.terminal(command=["sh", "-i"], mode="command") as term:
            # The first Ctrl-C comes while SIGINT is ignored (as one between two commands of a list, before the next
            # one started): only a Ctrl-C typed again ends the `sleep 300` that follows.
            waiting = term.submit("trap '' INT; echo waiting; sleep 1; trap - INT; sleep 300")
            term.read_until("waiting")
            after = term.run("echo after", cancel=True)
            assert (after["output"], after["exit_code"]) == ("after\n", 0)
            assert term.wait(waiting, timeout=10)["cancelled"] is True
            assert term.run("echo still")["output"] == "still\n"


def test_an_unknown_mode_closes_with_4422(env, url):
    with Client.from_outputs(outputs(url)) as client:
        sandbox = client.claim("py", "term-mode")
        with pytest.raises(InvalidRequest, match="query mode 'batch' is not one of: raw, command"):
            with sandbox.terminal(mode="batch") as term:
                term.recv(timeout=10)


def test_the_async_terminals_command_mode(env, url):
    async def main():
        async with AsyncClient.from_outputs(outputs(url)) as client:
            sandbox = await client.claim("py", "term-cmd-async")
            async with sandbox.terminal(command=["sh", "-i"], mode="command") as term:
                result = await term.run("echo $((6 * 7)); false")
                return result["output"], result["exit_code"]

    assert asyncio.run(main()) == ("42\n", 1)
