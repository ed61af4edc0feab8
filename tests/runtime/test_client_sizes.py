"""sandstack.client's `claim(..., size=...)`, sync and async, over a runtime with size classes (fake backend): the
class reaches the runtime, and an unknown one raises its 422 at once, naming the classes, with no host taken."""

from __future__ import annotations

import asyncio

import pytest
from fastapi.testclient import TestClient

from sandstack.client import AsyncClient, InvalidRequest
from tests.runtime.conftest import TOKEN
from tests.runtime.ondemand_helpers import TWO_HOSTS as OUTPUTS, WARM, two_hosts
from tests.runtime.served import serve
from tests.runtime.test_sizes import BODY, LARGE_BODY, sized_config

UNKNOWN = "pool 'od' has no size class 'huge': its classes are large, wide (or name none for the pool's own limits)"


@pytest.fixture
def two(tmp_path):
    with two_hosts(tmp_path, sized_config()) as both:
        yield both


def test_a_sized_claim_through_the_client_and_its_release(two):
    envs, client = two
    sandbox = client.claim("od", "chat-1", size="large")
    backend = envs[sandbox.host.name].backend
    assert (sandbox.name, sandbox.info["size"], backend.limits[WARM]) == (WARM, "large", LARGE_BODY)
    sandbox.host.release("chat-1")
    assert backend.limits[WARM] == BODY


def test_an_unknown_class_raises_the_runtimes_422_and_no_host_takes_the_session(two):
    envs, client = two
    with pytest.raises(InvalidRequest) as refused:
        client.claim("od", "chat-1", size="huge")
    assert (refused.value.status, refused.value.message) == (422, UNKNOWN)
    assert all(env.runtime.store.by_session("operator/chat-1") is None for env in envs.values())


def test_the_async_client_claims_a_class_and_gets_the_same_422(two):
    envs, _ = two
    env = envs["a"]
    with serve(env.api.app) as url:
        outputs = {"hosts": {"a": {"url": url, "token": TOKEN}}, "pools": {"od": ["a"]}}

        async def run() -> tuple[str, str, int, str]:
            async with AsyncClient.from_outputs(outputs) as aclient:
                sandbox = await aclient.claim("od", "chat-2", size="large")
                try:
                    await aclient.claim("od", "chat-3", size="huge")
                except InvalidRequest as error:
                    return sandbox.name, sandbox.info["size"], error.status, error.message
                raise AssertionError("the unknown class was taken")
        assert asyncio.run(run()) == (WARM, "large", 422, UNKNOWN)
    assert env.backend.limits[WARM] == LARGE_BODY


def test_the_cli_claims_a_class_and_reports_an_unknown_one(two, tmp_path, monkeypatch, capsys):
    import json

    from tests.runtime.test_client import run_cli

    envs, client = two

    def factory(endpoint, timeout, headers):
        return TestClient(envs[endpoint.name].api.app, base_url=endpoint.url, headers=headers)

    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(OUTPUTS))
    code, out = run_cli(["claim", "od", "chat-1", "--size", "large"], outputs, factory, monkeypatch, capsys)
    host, name = out.out.strip().split("/")
    assert (code, name, envs[host].backend.limits[WARM]) == (0, WARM, LARGE_BODY)
    code, out = run_cli(["claim", "od", "chat-2", "--size", "huge"], outputs, factory, monkeypatch, capsys)
    first = client.hosts_for("od", "chat-2")[0]  # the first host asked answers 422: no other is tried
    assert (code, out.err) == (1, f"sandstack sandbox: {first}: {UNKNOWN} (HTTP 422)\n")
