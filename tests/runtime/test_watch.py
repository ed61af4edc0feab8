"""A watch of a workspace directory on the fake backend: another command's writes arrive as change events; paths
out of the workspace or not directories are refused as every file operation refuses them."""

from __future__ import annotations

import asyncio


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


def test_a_watch_sees_what_another_command_writes_until_its_output_is_full(roomy):
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
            sandbox.exec(["sh", "-c", "echo 1 > out/result.json"])  # 105 bytes of events in all: past the 100 kept
            with pytest.raises(Conflict, match="the watch has reported as much as the runtime keeps"):
                next(events)
        assert [p.status for p in sandbox.processes()] == ["killed"]  # stopped with its `with`


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
