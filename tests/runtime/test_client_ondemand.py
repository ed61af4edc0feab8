"""sandstack.client with on-demand pools and hibernation, over two hosts' runtimes (fake backend)."""

from __future__ import annotations

import threading

import pytest

from sandstack.client import NoCapacity
from tests.runtime.conftest import TOKEN, hk
from tests.runtime.ondemand_helpers import PLACES, WARM, two_hosts



@pytest.fixture
def two(tmp_path):
    with two_hosts(tmp_path) as both:
        yield both


def test_claims_create_on_demand_then_fail_over_then_refuse_past_every_ceiling(two):
    envs, client = two
    sandboxes = [client.claim("od", f"chat-{i}") for i in range(6)]
    by_host = {name: sorted(s.name for s in sandboxes if s.host.name == name) for name in envs}
    assert by_host == {"a": [WARM, *PLACES], "b": [WARM, *PLACES]}
    with pytest.raises(NoCapacity) as refused:
        client.claim("od", "chat-7")
    assert "is at its ceiling of 3 sandboxes" in str(refused.value)
    assert all(s.exec(["true"])["exit_code"] == 0 for s in sandboxes)


def test_hibernate_and_resume_through_the_client(two):
    _, client = two
    sandbox = client.claim("od", "chat-1")
    sandbox.write_file("notes.txt", "kept")
    assert sandbox.hibernate()["status"] == "hibernated"
    assert sandbox.resume()["status"] == "bound"
    assert sandbox.read_file("notes.txt") == b"kept"
    sandbox.hibernate()
    assert sandbox.exec(["cat", "notes.txt"])["stdout"] == "kept"  # the next call resumes it


def test_a_claim_of_a_session_being_created_waits_for_it(two):
    envs, client = two
    host = client.hosts_for("od", "slow")[0]
    env = envs[host]
    assert env.claim("taken", pool="od")["sandbox"] == WARM
    provisioner, release = env.backend.provisioner, threading.Event()
    provisioner.health_of[PLACES[0]] = "starting"

    def ready_later() -> None:
        release.wait(5)
        provisioner.health_of[PLACES[0]] = "healthy"

    first = threading.Thread(target=lambda: env.api.post("/v1/sessions", json={"pool": "od", "session": "slow"}))
    first.start()
    while env.runtime.store.by_session(hk("slow")) is None:
        release.wait(0.01)
    assert env.runtime.store.by_session(hk("slow")).status == "creating"
    threading.Timer(0.3, release.set).start()
    threading.Thread(target=ready_later).start()
    sandbox = client.claim("od", "slow")
    first.join()
    assert (sandbox.name, sandbox.info["status"]) == (PLACES[0], "bound")


def test_the_async_client_waits_for_a_session_being_created_too(two, tmp_path):
    """AsyncClient.claim answered 'creating' at once (only the sync client waited): a handle of a sandbox still
    being made."""
    import asyncio

    from sandstack.client import AsyncClient
    from tests.runtime.served import serve

    envs, client = two
    host = client.hosts_for("od", "slow")[0]
    env = envs[host]
    assert env.claim("taken", pool="od")["sandbox"] == WARM
    provisioner, release = env.backend.provisioner, threading.Event()
    provisioner.health_of[PLACES[0]] = "starting"
    first = threading.Thread(target=lambda: env.api.post("/v1/sessions", json={"pool": "od", "session": "slow"}))
    first.start()
    while env.runtime.store.by_session(hk("slow")) is None:
        release.wait(0.01)
    threading.Timer(0.5, lambda: provisioner.health_of.__setitem__(PLACES[0], "healthy")).start()
    with serve(env.api.app) as url:
        outputs = {"hosts": {host: {"url": url, "token": TOKEN}}, "pools": {"od": [host]}}

        async def claim() -> tuple[str, str, bool]:
            async with AsyncClient.from_outputs(outputs) as aclient:
                sandbox = await aclient.claim("od", "slow")
                return sandbox.name, sandbox.info["status"], bool(sandbox.token)
        assert asyncio.run(claim()) == (PLACES[0], "bound", True)
    first.join()
