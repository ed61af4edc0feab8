"""Snapshots that travel between hosts on the real engine (docs/design/snapshot-store.md): two stacks on this daemon
stand for two hosts of pool `work` (each its own runtime, state volume and sandbox), both keeping snapshots in
Debian's reference registry run on this machine's loopback (testbed/registry.py). A session's 256 MiB workspace
snapshotted on host A is restored on host B, which never had it: every file identical (sha256). Host A's runtime is
then stopped (the host lost), and the client restores the session on B from its last snapshot."""

from __future__ import annotations

import time

import pytest

from sandstack.client import Client
from testbed import registry
from testbed.deploy import shared_deployment
from testbed.registry import store_spec
from tests.engine.runtime_helpers import release_all

pytestmark = [pytest.mark.docker,
              pytest.mark.skipif(not registry.available(), reason="docker-registry is not installed "
                                 "(apt-get install docker-registry; scripts/test installs it)")]

PORTS = {"a": 17571, "b": 17572}
STACKS = {"a": "snapa", "b": "snapb"}
TOKEN = "engine-test-runtime-token-snapstore-1"
WORKSPACE_MIB = registry.WORKSPACE_MIB
SUMS = "cd /workspace && find . -type f | sort | xargs sha256sum"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with registry.running(tmp_path_factory.mktemp("registry")) as running:
        yield running


@pytest.fixture(scope="module")
def hosts(debian_image, harness_sweep_orphans, served, tmp_path_factory):
    secrets = {"runtimeToken": TOKEN, "storePassword": served.password}
    with shared_deployment(__file__, tmp_path_factory.mktemp("store-a"),
                           store_spec(debian_image, PORTS["a"], served.url), stack=STACKS["a"],
                           secret_config=secrets) as a, \
            shared_deployment(__file__, tmp_path_factory.mktemp("store-b"),
                              store_spec(debian_image, PORTS["b"], served.url), stack=STACKS["b"],
                              secret_config=secrets) as b:
        yield {"a": a, "b": b}


@pytest.fixture
def client(hosts):
    outputs = {"hosts": {name: {"url": f"http://127.0.0.1:{port}", "token": TOKEN} for name, port in PORTS.items()},
               "pools": {"work": ["a", "b"]}}
    with Client.from_outputs(outputs, actor="engine-test", timeout=300) as c:
        yield c
        for name in PORTS:
            try:
                release_all(c.host(name))
            except Exception:  # noqa: BLE001 -- a host the test stopped has nothing left to release
                pass


def test_a_256_mib_workspace_snapshotted_on_host_a_is_restored_identical_on_host_b(hosts, client, served):
    on_a = client.host("a").claim("work", "travel-1")
    sandbox_a = client.sandbox(f"a/{on_a['sandbox']}")
    made = sandbox_a.exec(["sh", "-c", f"head -c {WORKSPACE_MIB}M /dev/urandom > /workspace/big.bin && mkdir -p "
                          "/workspace/src && echo 'print(1)' > /workspace/src/main.py && ln -s src/main.py "
                          "/workspace/link.py"], timeout=120)
    assert made.exit_code == 0, made
    sums_a = sandbox_a.exec(["sh", "-c", SUMS]).stdout
    assert len(sums_a.splitlines()) == 2 and "./big.bin" in sums_a
    snap = sandbox_a.snapshot()
    assert snap.info["size"] > WORKSPACE_MIB * 1024 * 1024
    started = time.monotonic()
    on_b = client.host("b").claim("work", "travel-1", from_snapshot=snap.id)
    took = time.monotonic() - started
    sandbox_b = client.sandbox(f"b/{on_b['sandbox']}")
    assert sandbox_b.exec(["sh", "-c", SUMS]).stdout == sums_a
    assert sandbox_b.exec(["readlink", "/workspace/link.py"]).stdout == "src/main.py\n"
    assert client.host("b").snapshots() == []  # b restored a's snapshot; it keeps none of its own
    print(f"cross-host restore of a {WORKSPACE_MIB} MiB workspace: {took:.2f} s")


def test_a_lost_hosts_session_is_restored_on_the_other_host_from_its_last_snapshot(hosts, client, docker_client):
    on_a = client.host("a").claim("work", "lost-1")
    sandbox_a = client.sandbox(f"a/{on_a['sandbox']}")
    sandbox_a.write_file("state.txt", "the last state on a")
    last = sandbox_a.snapshot()
    runtime_a = docker_client.containers.get(hosts["a"].name("runtime"))
    runtime_a.stop(timeout=30)  # host a lost: its runtime does not answer
    try:
        restored = client.claim("work", "lost-1", from_snapshot=last)
        assert (restored.host.name, restored.read_file("state.txt")) == ("b", b"the last state on a")
    finally:
        runtime_a.start()
