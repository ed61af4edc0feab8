"""Terminals over the WebSocket on the fake backend (a real pseudo-terminal): an interactive shell with resize,
in the workspace, its exit code, what it started killed when it closes, refusals as typed errors, audit lines
without input or output, and the async form."""

from __future__ import annotations

import asyncio
import time

import pytest

from sandstack.client import AsyncClient, Client, NotFound, Unauthorized
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
