"""A watch of a workspace directory on the fake backend: another command's writes arrive as change events; paths
out of the workspace or not directories are refused as every file operation refuses them."""

from __future__ import annotations

import asyncio
import time


import pytest

from sandstack.client import AsyncClient, Client, Conflict
from sandstack.client.watch import WatchEvent
from tests.runtime.conftest import make_config, make_env
from tests.runtime.served import serve
from tests.runtime.test_client_async import outputs


@pytest.fixture
def roomy(tmp_path):
    """A runtime keeping 100 bytes of a process's output (the suite's default keeps 64)."""
    environment = make_env(tmp_path, make_config(output_limit_bytes=100))
    yield environment
    environment.backend.close()
    environment.audit.close()


def test_a_watch_reports_on_past_the_output_limit(roomy):
    env = roomy
    with serve(env.api.app) as url, Client.from_outputs(outputs(url)) as client:
        sandbox = client.claim("py", "watcher")
        sandbox.exec(["mkdir", "-p", "out"])
        with sandbox.watch("out", interval=0.1) as changes:
            events = iter(changes)
            sandbox.exec(["sh", "-c", "echo 1 > out/result.json"])
            assert next(events) == WatchEvent("created", "out/result.json")
            sandbox.exec(["sh", "-c", "echo 22 > out/result.json"])
            assert next(events) == WatchEvent("modified", "out/result.json")
            sandbox.exec(["rm", "out/result.json"])
            assert next(events) == WatchEvent("deleted", "out/result.json")
            for round in range(12):  # over 300 bytes of events in all: three times the 100 the runtime keeps
                sandbox.exec(["sh", "-c", f"echo {round} > out/r{round}.json"])
                assert next(events) == WatchEvent("created", f"out/r{round}.json")
            info = sandbox.process(changes.process.id).info
            assert (info.status, info.stdout_dropped, info.stdout_bytes > 300) == ("running", 0, True)
        # Stopped with its `with`: the kill answers after KILL_WAIT at most, so a busy machine may record the end a
        # moment later (a bound on waiting, not a timing assertion).
        deadline = time.monotonic() + 60
        while [p.status for p in sandbox.processes()] == ["running"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [p.status for p in sandbox.processes()] == ["killed"]


def test_a_watch_read_too_late_says_what_it_missed(roomy):
    env = roomy
    with serve(env.api.app) as url, Client.from_outputs(outputs(url)) as client:
        sandbox = client.claim("py", "watcher")
        sandbox.exec(["mkdir", "-p", "out"])
        with sandbox.watch("out", interval=0.1) as changes:
            process = changes.process
            sandbox.exec(["sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do echo > out/file-$i.json; done"])
            deadline = time.monotonic() + 60  # a bound on waiting: a busy machine writes the events later
            while sandbox.process(process.id).info.output_end < 150 and time.monotonic() < deadline:
                time.sleep(0.05)
            with pytest.raises(Conflict, match="the watch's events moved on past what was read") as caught:
                next(iter(changes))
            assert caught.value.body["process"] == process.id
            assert caught.value.body["to"] > caught.value.body["from"] >= 8  # after its `ready` line


def test_a_watch_refuses_what_a_file_operation_refuses(env):
    sandbox = env.claim("chat-1")["sandbox"]
    (env.backend.path(sandbox, "/workspace") / "file.txt").write_text("x")
    for path, status, error in [
        ("../etc", 403, "path '../etc' contains '..'"),
        ("missing", 404, f"file 'missing' does not exist in sandbox {sandbox!r}"),
        ("file.txt", 409, "a parent of path 'file.txt' is not a directory"),
    ]:
        response = env.api.post(f"/v1/sandboxes/{sandbox}/watch", json={"path": path})
        assert (response.status_code, response.json()["error"]) == (status, error), path


def test_the_async_watch(env):
    async def session(url):
        async with AsyncClient.from_outputs(outputs(url)) as client:
            sandbox = await client.claim("py", "awatch")
            async with await sandbox.watch("", interval=0.1) as changes:
                await sandbox.exec(["touch", "new.txt"])
                async for change in changes:
                    return change
    with serve(env.api.app) as url:
        assert asyncio.run(session(url)) == WatchEvent("created", "new.txt")


def test_a_rolling_log_keeps_the_last_limit_characters_however_long_it_runs():
    from sandstack.runtime.output import OutputLog

    log = OutputLog(1000, rolling=True)
    line = "created\tout/some-file.json\n"
    for _ in range(100_000):  # 2.7 MB of events, in writes of one line
        log.write("stdout", line.encode())
    assert log.end == 100_000 * len(line) and log.start == log.end - 1000
    assert log.dropped["stdout"] == 0 and log.kept["stdout"] == log.end
    assert len(log.text("stdout")) == 1000 and log.text("stdout").endswith(line)
    assert log.read(log.end - len(line)) == [(log.end, "stdout", line)]
    assert "".join(text for _, _, text in log.read(0)) == log.text("stdout")  # from the oldest kept
