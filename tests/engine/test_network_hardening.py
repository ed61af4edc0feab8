"""Network holes found by the attack run, each proven closed on the real engine.

"The internet" here is what it is on a real host: network namespaces reached through the host's routing
(a veth pair and a host route), not a Docker network the gateway joins, so the gateway's own route out
is part of what is tested. The metadata service is a namespace at 169.254.169.254 (a /30 on this host
that no other route can beat; checked before any probe).

Stack: `web` (allow-list, publishes a port: a routed gateway pool, whose network name sorts before the
egress network's old name), `listed` (allow-list), `logged` (allow-all through the gateway), `direct`
(allow-all, `log: false`, a deny CIDR), `meta` (allow-all, `log: false`, `allow_metadata: true`).
"""

from __future__ import annotations

import socket
import struct

import pytest

from testbed.deploy import engine_spec
from tests.engine.net.lab import netns_address
from tests.engine.net.probes import answered, curl, probe, tcp, template
from tests.engine.net.stack import access_log, deployed
from sandstack.plan.gateway import GATEWAY_PIDS
from tests.engine.sandbox_helpers import parent_cgroup, python, read_int

pytestmark = pytest.mark.docker

INET, BLOCKED = 0, 1  # Lab.netns indexes
METADATA = "169.254.169.254"
HOLD = 600  # connections one sandbox tries to hold open to its gateway port
CROWD = 5  # sandboxes of one pool that together try 5 × 256 connections, past the pool's 1024


@pytest.fixture(scope="module")
def net(docker_client, debian_image, harness_sweep_orphans, tmp_path_factory):
    tests_range = "198.18.0.0/15"
    spec = engine_spec(debian_image, {
        "web": template(debian_image, {"egress": "allow-list", "allow": [tests_range]},
                        ports=[{"port": 8000, "exposure": "host"}]),
        "listed": template(debian_image, {"egress": "allow-list", "allow": [tests_range]},
                           limits={"cpus": 0.5, "memory": "128MiB", "pids": 64, "open_files": 4096}),
        "logged": template(debian_image, {"egress": "allow-all"}),
        "direct": template(debian_image, {"egress": "allow-all", "log": False,
                                          "deny": [f"{netns_address(BLOCKED)}/32"]}),
        "meta": template(debian_image, {"egress": "allow-all", "log": False, "allow_metadata": True}),
        "crowd": template(debian_image, {"egress": "allow-list", "allow": [tests_range]},
                          limits={"cpus": 0.25, "memory": "128MiB", "pids": 64, "open_files": 4096}),
    }, {
        **{p: {"template": p, "hosts": ["local"]} for p in ("web", "listed", "logged", "direct", "meta")},
        "crowd": {"template": "crowd", "hosts": ["local"], "replicas": CROWD},
    })
    with deployed(__file__, "hd", tmp_path_factory.mktemp("hardening"), spec, docker_client, debian_image,
                  {**{p: 1 for p in ("web", "listed", "logged", "direct", "meta")}, "crowd": CROWD}) as stack:
        lab = stack.lab
        stack.extra["inet"] = lab.netns("inet", INET, ["tcp:80"])
        stack.extra["blocked"] = lab.netns("blocked", BLOCKED, ["tcp:80"])
        stack.extra["metadata"] = lab.netns("meta", 2, ["tcp:80"], address=METADATA)
        yield stack


def _default_gateway(container) -> str:
    """The container's default route's next hop, from /proc/net/route (no `ip` needed in the image)."""
    code, out = container.exec_run(["cat", "/proc/net/route"])
    assert code == 0, out
    for line in out.decode().splitlines()[1:]:
        fields = line.split()
        if fields[1] == "00000000":
            return socket.inet_ntoa(struct.pack("<I", int(fields[2], 16)))
    raise AssertionError(f"no default route in {container.name}: {out.decode()}")


def test_gateway_routes_out_through_the_egress_network_with_a_publishing_gateway_pool_present(net):
    net.proves("Container.networksAdvanced", "Network.options")
    assert _default_gateway(net.gateway) == net.bridge_gateway("egress")
    inet = net.extra["inet"]
    # Through the host's routing to "the internet", for the publishing pool and the internal one alike.
    for pool in ("web", "listed"):
        got = curl(net.sandbox(pool), f"http://{inet.ip}/")
        assert (got.status, got.body) == (200, f"netns {inet.ip}"), (pool, got)


@pytest.mark.parametrize("pool", ["logged", "direct"])
def test_metadata_address_is_refused_by_default_in_both_allow_all_modes(net, pool):
    metadata, inet = net.extra["metadata"], net.extra["inet"]
    since = len(metadata.lines())
    sandbox = net.sandbox(pool)
    if pool == "logged":
        assert curl(sandbox, f"http://{METADATA}/latest/meta-data/").status == 403
    else:
        assert not answered(probe(sandbox, {"metadata": tcp(METADATA, 80)}))
    # The control: the same sandbox reaches an ordinary outside address.
    assert curl(sandbox, f"http://{inet.ip}/").status == 200
    assert metadata.lines()[since:] == []


def test_metadata_opt_in_reaches_it(net):
    metadata = net.extra["metadata"]
    got = curl(net.sandbox("meta"), f"http://{METADATA}/")
    assert (got.status, got.body) == (200, f"netns {METADATA}")
    assert any(line.startswith("tcp 80 ") for line in metadata.lines())


def test_direct_egress_deny_cidr_is_enforced_by_the_guard(net):
    blocked, inet = net.extra["blocked"], net.extra["inet"]
    since = len(blocked.lines())
    sandbox = net.sandbox("direct")
    results = probe(sandbox, {"blocked": tcp(blocked.ip, 80), "inet": tcp(inet.ip, 80)})
    assert results == {"blocked": results["blocked"], "inet": "connected:netns"}, results
    assert not answered({"blocked": results["blocked"]}), results
    assert blocked.lines()[since:] == []


# Opens as many connections as it can to the pool's gateway port and holds them; prints how many opened.
HOLDER = """
import os, socket, time
host, port = os.environ['HTTP_PROXY'].rsplit('/', 1)[1].rsplit(':', 1)
held, refused = [], 0
for _ in range({n}):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((host, int(port)))
        held.append(s)
    except OSError:
        refused += 1
        s.close()
print(len(held), refused, flush=True)
time.sleep({hold})
"""


def _hold(sandbox, n: int, seconds: int):
    """Starts HOLDER in `sandbox`; returns its output stream (first line: held and refused counts)."""
    exec_id = sandbox.client.api.exec_create(sandbox.id, ["timeout", str(seconds + 20), "python3", "-c",
                                                          HOLDER.format(n=n, hold=seconds)])["Id"]
    return sandbox.client.api.exec_start(exec_id, stream=True)


def test_one_pool_holding_gateway_connections_gets_at_most_its_share_and_another_pool_is_served(net):
    streams = [_hold(net.sandbox("crowd", i), 256, 40) for i in range(CROWD)]
    counts = [tuple(int(x) for x in next(iter(s)).decode().split()) for s in streams]
    held = sum(h for h, _ in counts)
    # The guard resets the pool's 1025th connection (all its sandboxes together) and each sandbox's 257th.
    assert 1000 <= held <= 1024, counts
    got = curl(net.sandbox("logged"), f"http://{net.extra['inet'].ip}/", timeout=5)
    assert got.status == 200, got


def test_one_sandbox_holding_gateway_connections_neither_exceeds_its_share_nor_stalls_another_pool(net):
    net.proves("Container.ulimits")
    hog, other, inet = net.sandbox("listed"), net.sandbox("logged"), net.extra["inet"]
    first = next(iter(_hold(hog, HOLD, 40))).decode().split()
    held, refused = int(first[0]), int(first[1])
    # The guard resets connections past 256 per sandbox (squid's own per-client cap is the same).
    assert 200 <= held <= 256 and refused == HOLD - held, (held, refused)
    # Meanwhile another pool is served at once.
    got = curl(other, f"http://{inet.ip}/", timeout=5)
    assert (got.status, got.body) == (200, f"netns {inet.ip}"), got
    code, out = python(other, "import resource; print(resource.getrlimit(resource.RLIMIT_NOFILE))")
    assert out.strip() == "(1024, 1024)", out  # the built-in open-files limit of a sandbox
    assert any(f"dest={inet.ip}:80" in line for line in access_log(net)[-5:])


def test_the_gateway_runs_under_a_pids_limit_and_the_guard_under_a_cpu_limit(net):
    net.proves("Container.cgroupParent", "Container.cpus")
    assert read_int(parent_cgroup(net.gateway, "pids") / "pids.max") == GATEWAY_PIDS
    net.guard.reload()
    assert net.guard.attrs["HostConfig"]["NanoCpus"] == 500_000_000
