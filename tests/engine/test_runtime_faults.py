"""The runtime's policies and faults on the real engine: idle sessions paused from outside the sandbox, a sandbox
that died while bound reported unhealthy and reset, disk workspaces emptied on release like tmpfs, and a client
failing over to another host of the pool when one host's runtime does not answer."""

from __future__ import annotations

import time

import pytest
import yaml

from sandstack.client import Client
from testbed.deploy import engine_spec, shared_deployment
from tests.engine.runtime_helpers import answers, release_all
from testbed.waiting import wait_until

pytestmark = pytest.mark.docker

TOKEN = "engine-test-runtime-token-fault-0123"


def _spec(image: str, port: int, *, idle: str = "pause") -> str:
    agent = {"base_image": image, "command": ["sleep", "infinity"], "limits": {"memory": "128MiB"},
             "workdir": "/workspace",
             "filesystem": {"writable": [{"path": "/workspace", "size": "16MiB"},
                                         {"path": "/data", "type": "disk", "size": "16MiB"}]},
             "session": {"idle": idle, "idle_after": "3s"}}
    data = yaml.safe_load(engine_spec(image, {"agent": agent},
                                      {"agent": {"template": "agent", "hosts": ["local"], "replicas": 2}}))
    data["hosts"]["local"]["runtime"] = {"port": port, "token": {"secret": "runtimeToken"}}
    data["hosts"]["local"]["disk_workspaces"] = "1GiB"
    return yaml.safe_dump(data, sort_keys=False)


def _client(stack, port: int, name: str = "local") -> Client:
    """A client of one host's runtime, from the stack output (on the host's loopback: exposure 'host')."""
    assert stack.result.outputs["runtime"]["hosts"]["local"]["url"] == f"http://127.0.0.1:{port}"
    return Client.from_outputs({"hosts": {name: {"url": f"http://127.0.0.1:{port}", "token": TOKEN}},
                                "pools": {"agent": [name]}}, actor="engine-test")


@pytest.fixture(autouse=True)
def released(first):
    """Each test starts with every sandbox of the pool idle, whatever the one before left bound."""
    yield
    if answers(17490):
        release_all(_client(first, 17490).host("local"))


@pytest.fixture(scope="module")
def first(debian_image, harness_sweep_orphans, tmp_path_factory):
    with shared_deployment(__file__, tmp_path_factory.mktemp("runtime-a"), _spec(debian_image, 17490),
                           secret_config={"runtimeToken": TOKEN}) as shared:
        yield shared


def test_an_idle_session_is_paused_from_outside_and_resumed_by_the_next_call(first):
    client = _client(first, 17490)
    sandbox = client.claim("agent", "idle-chat")
    sandbox.exec(["true"])
    wait_until(lambda: sandbox.status()["status"] == "paused", 30, what="the idle session to be paused")
    assert first.container("agent", int(sandbox.name.rsplit("-", 1)[1])).attrs["State"]["Paused"] is True
    assert sandbox.exec(["echo", "back"])["stdout"] == "back\n"  # the next call resumes it
    assert sandbox.status()["status"] == "bound"
    sandbox.release()


def test_a_busy_session_is_not_idle(first):
    client = _client(first, 17490)
    sandbox = client.claim("agent", "busy-chat")
    # CPU use counts as activity, without any API call.
    sandbox.exec(["sh", "-c", "nohup sh -c 'while :; do :; done' >/dev/null 2>&1 &"])
    time.sleep(8)
    assert sandbox.status()["status"] == "bound"
    sandbox.release()


def test_disk_workspaces_are_emptied_on_release_like_tmpfs(first):
    client = _client(first, 17490)
    sessions = [client.claim("agent", f"disk-{i}") for i in range(2)]
    for s in sessions:
        s.exec(["sh", "-c", "echo secret > /data/left && echo secret > /workspace/left"])
        s.release()
    for i, s in enumerate(client.claim("agent", f"disk-next-{i}") for i in range(2)):
        assert s.exec(["sh", "-c", "ls -A /data /workspace"])["stdout"].split() in (
            ["/data:", "lost+found", "/workspace:"], ["/data:", "/workspace:"]), s.name
        s.release()


def test_a_sandbox_that_died_while_bound_is_reported_unhealthy_and_reset(first, docker_client):
    client = _client(first, 17490)
    sandbox = client.claim("agent", "doomed")
    container = docker_client.containers.get(sandbox.name)
    container.kill()  # as an OOM kill or a crash would; its restart policy brings it back only on failure exits
    wait_until(lambda: sandbox.status()["status"] in ("unhealthy", "idle"), 30, what="the runtime to notice")
    wait_until(lambda: sandbox.status()["status"] == "idle", 60, what="the dead sandbox to be reset into the pool")
    assert sandbox.status()["session"] is None
    assert docker_client.containers.get(sandbox.name).status == "running"


def test_a_claim_fails_over_to_another_host_when_one_runtime_does_not_answer(first, debian_image, tmp_path_factory,
                                                                           docker_client):
    with shared_deployment(__file__, tmp_path_factory.mktemp("runtime-b"), _spec(debian_image, 17491),
                           secret_config={"runtimeToken": TOKEN}) as second:
        client = Client.from_outputs({"hosts": {"a": {"url": "http://127.0.0.1:17490", "token": TOKEN},
                                                "b": {"url": "http://127.0.0.1:17491", "token": TOKEN}},
                                      "pools": {"agent": ["a", "b"]}}, actor="engine-test", timeout=5)
        # Sessions whose first choice is host a (the client rotates by session id).
        sessions = [s for s in (f"fo-{i}" for i in range(40)) if client.hosts_for("agent", s)[0] == "a"][:2]
        runtime_a = docker_client.containers.get(first.name("runtime"))
        runtime_a.stop(timeout=5)
        try:
            claimed = [client.claim("agent", s) for s in sessions]
            assert {c.host.name for c in claimed} == {"b"}
            assert all(c.name.startswith(f"sandstack-{second.stack}-agent-") for c in claimed)
            for c in claimed:
                c.release()
        finally:
            runtime_a.start()
            wait_until(lambda: answers(17490), 30, what="host a's runtime to answer again")
