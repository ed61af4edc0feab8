"""sandstack.client over two hosts' runtimes, failover, and the `sandstack sandbox` commands."""

from __future__ import annotations

import argparse
import json

import httpx
import pytest
from fastapi.testclient import TestClient

from sandstack.client import Client, HostUnavailable, NoCapacity
from sandstack.plan.runtime import PoolRuntime, RuntimeConfig
from sandstack.tooling.sandbox_cli import add_sandbox_commands
from tests.runtime.conftest import PY, TOKEN, WRITABLE, hk, make_env

OUTPUTS = {"runtime": {"hosts": {"a": {"url": "http://a.test", "token": TOKEN},
                                 "b": {"url": "http://b.test", "token": TOKEN}},
                       "pools": {"py": ["a", "b"]}}}


def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


@pytest.fixture
def two_hosts(tmp_path):
    envs = {"a": make_env(tmp_path / "a"), "b": make_env(tmp_path / "b")}
    down: set[str] = set()

    def factory(endpoint, timeout, headers):
        if endpoint.name in down:
            return httpx.Client(base_url=endpoint.url, headers=headers, transport=httpx.MockTransport(refused))
        return TestClient(envs[endpoint.name].api.app, base_url=endpoint.url, headers=headers)

    yield envs, down, factory
    for env in envs.values():
        env.backend.close()
        env.audit.close()


def test_a_session_goes_to_the_same_host_and_the_whole_api_works(two_hosts):
    envs, _, factory = two_hosts
    client = Client.from_outputs(OUTPUTS, http_factory=factory, actor="agent-7")
    sandbox = client.claim("py", "chat-1")
    assert sandbox.host.name == client.hosts_for("py", "chat-1")[0]
    assert client.claim("py", "chat-1").name == sandbox.name
    assert sandbox.exec(["echo", "hi"])["stdout"] == "hi\n"
    sandbox.write_file("dir/f.txt", "text")
    assert sandbox.read_file("dir/f.txt") == b"text"
    assert sandbox.list_dir("dir") == [{"name": "f.txt", "type": "file", "size": 4, "mode": "0644"}]
    snap = sandbox.snapshot()
    sandbox.delete_file("dir")
    sandbox.restore(snap)
    branch = client.claim("py", "chat-2", from_snapshot=str(snap))
    assert (branch.host.name, branch.read_file("dir/f.txt")) == (sandbox.host.name, b"text")
    assert sandbox.pause()["status"] == "paused"
    assert sandbox.resume()["status"] == "bound"
    assert sandbox.release()["status"] == "idle"
    assert envs[sandbox.host.name].audit.tail(1)[0]["who"] == "agent-7@testclient"


def test_a_claim_fails_over_to_the_next_host_when_one_does_not_answer(two_hosts):
    envs, down, factory = two_hosts
    first = Client.from_outputs(OUTPUTS, http_factory=factory).hosts_for("py", "chat-1")[0]
    down.add(first)
    client = Client.from_outputs(OUTPUTS, http_factory=factory)
    sandbox = client.claim("py", "chat-1")
    assert sandbox.host.name != first
    assert envs[sandbox.host.name].runtime.store.by_session(hk("chat-1")).name == sandbox.name


def test_a_claim_moves_on_when_a_host_has_no_capacity_and_fails_when_none_has(two_hosts):
    envs, down, factory = two_hosts
    client = Client.from_outputs(OUTPUTS, http_factory=factory)
    hosts = {client.claim("py", f"s{i}").host.name for i in range(8)}
    assert hosts == {"a", "b"}
    with pytest.raises(NoCapacity) as error:
        client.claim("py", "s9")
    assert error.value.status == 503
    assert "no host of pool 'py' could take session 's9'" in error.value.message
    down.update({"a", "b"})
    with pytest.raises(HostUnavailable):
        Client.from_outputs(OUTPUTS, http_factory=factory).claim("py", "s10")


def run_cli(argv, outputs, factory, monkeypatch, capsys):
    import sandstack.client as package

    monkeypatch.setattr(package.Client, "from_file",
                        classmethod(lambda cls, path, **kw: cls.from_outputs(json.loads(open(path).read()),
                                                                             http_factory=factory, **kw)))
    parser = argparse.ArgumentParser(prog="sandstack")
    add_sandbox_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["sandbox", "--outputs", str(outputs), *argv])
    code = args.func(args)
    return code, capsys.readouterr()


def test_cli_claims_execs_and_reports_refusals(two_hosts, tmp_path, monkeypatch, capsys):
    _, _, factory = two_hosts
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(OUTPUTS))
    code, out = run_cli(["claim", "py", "chat-1"], outputs, factory, monkeypatch, capsys)
    ref = out.out.strip()
    assert code == 0 and ref.split("/")[1] == PY[0]
    code, out = run_cli(["exec", ref, "--", "sh", "-c", "echo out; exit 4"], outputs, factory, monkeypatch, capsys)
    assert (code, out.out) == (4, "out\n")
    code, out = run_cli(["status", "a/nope"], outputs, factory, monkeypatch, capsys)
    assert (code, out.err) == (1, "sandstack sandbox: a: sandbox 'nope' is not on host 'local' (HTTP 404)\n")


def test_runtime_config_round_trips_and_names_bad_fields():
    config = RuntimeConfig(host="h", pools={"py": PoolRuntime(("s-0",), "/workspace", WRITABLE)})
    assert RuntimeConfig.from_json(config.to_json()) == config
    with pytest.raises(ValueError, match=r"^workspace_root: 'rel' must be a normalised absolute path other than '/'$"):
        PoolRuntime(("s-0",), "rel", WRITABLE)
    with pytest.raises(ValueError, match=r"^pools.b.sandboxes: 's-0' is also in pool 'a'$"):
        RuntimeConfig(host="h", pools={"a": PoolRuntime(("s-0",), "/w", ()), "b": PoolRuntime(("s-0",), "/w", ())})
