"""`Client.claim(..., secrets=...)` and its async form pass a session's own secrets (env and files) to the runtime,
against a served runtime (fake backend)."""

from __future__ import annotations

import asyncio

import pytest

from sandstack.client import AsyncClient, Client
from tests.runtime.conftest import TOKEN, make_env
from tests.runtime.served import serve

DIR = "/run/secrets/session"
SECRET = "cl-" + "a1b2c3" * 6


@pytest.fixture
def served(tmp_path):
    env = make_env(tmp_path, writable={"/workspace": "tmpfs", "/tmp": "tmpfs", DIR: "tmpfs"})
    with serve(env.api.app) as base:
        yield env, {"hosts": {"local": {"url": base, "token": TOKEN}}, "pools": {"web": ["local"]}}
    env.backend.close()
    env.audit.close()


def test_the_sync_client_passes_env_and_files(served):
    env, outputs = served
    with Client.from_outputs(outputs) as client:
        sandbox = client.claim("web", "s1", secrets={"env": {"API_TOKEN": SECRET}, "files": {"key": SECRET}})
        assert sandbox.exec(["sh", "-c", 'printf %s "$API_TOKEN"'])["stdout"] == SECRET
        assert (env.backend.path(sandbox.name, DIR) / "key").read_text() == SECRET
        sandbox.release()
    assert list(env.backend.path(sandbox.name, DIR).iterdir()) == []


def test_the_async_client_passes_them_too(served):
    env, outputs = served

    async def run() -> str:
        async with AsyncClient.from_outputs(outputs) as client:
            sandbox = await client.claim("web", "s2", secrets={"files": {"key": SECRET}})
            return sandbox.name

    name = asyncio.run(run())
    assert (env.backend.path(name, DIR) / "key").read_text() == SECRET
    assert env.runtime.credentials.files(name) == {"key": SECRET}
