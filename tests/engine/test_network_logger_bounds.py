"""Proof on a real Docker engine that the connection logger fails closed (issue 19): a direct route's new and open
connections are bounded per sandbox and per pool, every connection that passes has its line, none passes while the
logger is down, the connection and DNS logs rotate by size, and the gateway's own lookups go through a logging
resolver of the host, never the host's resolvers.

Floods are short (FLOOD_SECONDS), go only to a network namespace of this machine (tests/engine/net/lab.py), and
their connection-tracking entries (unanswered UDP, 30 s) are waited out before the test ends.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from testbed.deploy import engine_spec
from testbed.waiting import wait_until
from tests.engine.net.probes import probe, tcp, template
from tests.engine.net.stack import deployed

pytestmark = pytest.mark.docker

FLOOD_SECONDS = 3
FLOOD_PORT = 6000
LOGGED = {"rate": 50, "pool_rate": 80, "open": 4096, "pool_open": 8192}
BULK = {"rate": 10000, "pool_rate": 10000, "open": 150, "pool_open": 200}
CONNTRACK_COUNT = Path("/proc/sys/net/netfilter/nf_conntrack_count")
LOG = "/var/log/sandstack/connections.log"

# A new UDP flow (a new socket, so a new source port) per datagram, as fast as it can for `seconds`.
FLOOD = r'''
import socket, sys, time
host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
sent, end = 0, time.monotonic() + seconds
while time.monotonic() < end:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b"flood", (host, port)); sent += 1
    except OSError:
        pass
    s.close()
print(sent)
'''
# Inside the namespace, on FLOOD_PORT and the next one: every datagram's port and source port, a line each (never
# answered). The source address is the host's: Docker masquerades a routed bridge's traffic, keeping the port.
RECEIVER = r'''
import selectors, socket, sys
selector = selectors.DefaultSelector()
for port in (int(sys.argv[1]), int(sys.argv[1]) + 1):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", port))
    selector.register(s, selectors.EVENT_READ, port)
print("ready", flush=True)
while True:
    for key, _ in selector.select():
        data, peer = key.fileobj.recvfrom(64)
        print(key.data, peer[1], flush=True)
'''


@pytest.fixture(scope="module")
def net(docker_client, debian_image, harness_sweep_orphans, tmp_path_factory):
    spec = engine_spec(debian_image, {
        "flood": template(debian_image, {"egress": "allow-all", "protocols": "any", "connections": LOGGED}),
        "bulk": template(debian_image, {"egress": "allow-all", "log": False, "connections": BULK}),
        "listed": template(debian_image, {"egress": "allow-list", "allow": ["allowed.sandstack.test"]}),
    }, {name: {"template": name, "hosts": ["local"], "replicas": n}
        for name, n in (("flood", 1), ("bulk", 2), ("listed", 1))})
    with deployed(__file__, "lb", tmp_path_factory.mktemp("logger-bounds"), spec, docker_client, debian_image,
                  {"flood": 1, "bulk": 2, "listed": 1}) as stack:
        stack.extra["inet"] = stack.lab.netns("inet", 0, ["tcp:5432"])
        yield stack


@pytest.fixture
def receiver(net, tmp_path):
    """What reached the namespace: {(port, source port)}, read when called."""
    inet = net.extra["inet"]
    out = tmp_path / "received"
    with out.open("w") as handle:
        process = subprocess.Popen(["ip", "netns", "exec", inet.name, "python3", "-c", RECEIVER, str(FLOOD_PORT)],
                                   stdout=handle, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "ready" in out.read_text(), 10, what="the flood receiver")
        yield lambda: {tuple(map(int, line.split())) for line in out.read_text().splitlines()[1:]}
    finally:
        process.kill()  # the one process this fixture started, by its handle
        process.wait(timeout=10)


def _flood(sandbox, host: str, port: int = FLOOD_PORT) -> int:
    code, out = sandbox.exec_run(["python3", "-c", FLOOD, host, str(port), str(FLOOD_SECONDS)])
    assert code == 0, out
    return int(out.decode().split()[-1])


def _logger(net):
    return net.client.containers.get(net.name("logger"))


def _cat(net, path: str) -> str:
    return _logger(net).exec_run(["sh", "-c", f"cat {path} 2>/dev/null"]).output.decode()


def _settled(baseline: int) -> None:
    """Waits until the flood's conntrack entries (unanswered UDP: 30 s) are gone again."""
    wait_until(lambda: int(CONNTRACK_COUNT.read_text()) <= baseline + 200 or None, 45,
               what=f"the host's conntrack table back near {baseline} entries")


def test_a_flood_is_bounded_and_every_connection_that_passes_is_logged(net, receiver):
    sandbox, inet = net.sandbox("flood"), net.extra["inet"]
    source, baseline = net.ip(sandbox), int(CONNTRACK_COUNT.read_text())
    sent = _flood(sandbox, inet.ip)
    time.sleep(1)
    arrived = {source_port for port, source_port in receiver() if port == FLOOD_PORT}
    logged = {int(m.group(1)) for m in re.finditer(
        rf"pool=flood .*SRC={re.escape(source)} DST={re.escape(inet.ip)} .*PROTO=UDP SPT=(\d+) DPT={FLOOD_PORT}\b",
        _cat(net, LOG + "*"))}
    unlogged = arrived - logged
    print(f"flood: {sent} flows sent in {FLOOD_SECONDS}s, {len(arrived)} arrived, {len(unlogged)} arrived unlogged")
    assert sent > 10 * LOGGED["rate"] * FLOOD_SECONDS, f"the flood sent only {sent} flows"  # it did flood
    assert not unlogged, f"{len(unlogged)} of {len(arrived)} flows passed without a log line"
    # The sandbox's bound (a burst of `rate`, then `rate` a second), with a second's slack for the clock.
    assert 0 < len(arrived) <= LOGGED["rate"] * (FLOOD_SECONDS + 2), f"{len(arrived)} flows passed the bound"
    _settled(baseline)


def test_no_connection_passes_while_the_logger_is_down(net):
    sandbox, inet, logger = net.sandbox("flood"), net.extra["inet"], _logger(net)
    assert probe(sandbox, {"tcp": tcp(inet.ip, 5432)}) == {"tcp": "connected:netns"}  # the control
    logger.stop(timeout=10)
    try:
        assert probe(sandbox, {"tcp": tcp(inet.ip, 5432)})["tcp"] == "timeout", "passed with no logger"
    finally:
        logger.start()
        wait_until(lambda: logger.reload() or logger.attrs["State"].get("Health", {}).get("Status") == "healthy"
                   or None, 30, what="the logger healthy again")
    assert probe(sandbox, {"tcp": tcp(inet.ip, 5432)}) == {"tcp": "connected:netns"}


def test_the_connection_and_dns_logs_rotate_by_size(net):
    sandbox, inet, logger = net.sandbox("flood"), net.extra["inet"], _logger(net)
    dns_log = "/var/log/sandstack/dns/flood.log"
    # Both logs just past their bound (a sparse file: the size is what counts, not the disk it takes).
    assert logger.exec_run(["truncate", "-s", "17M", LOG, dns_log]).exit_code == 0
    wait_until(lambda: _cat(net, LOG + ".1") and _cat(net, dns_log + ".1") or None, 10, what="the logs rotated")
    size = logger.exec_run(["stat", "-c", "%s", LOG]).output.decode().strip()
    assert int(size) < 1 << 20, size
    # The writers went on in new files: the connection logger in its own, the resolver after its SIGUSR2.
    assert probe(sandbox, {"tcp": tcp(inet.ip, 5432)}) == {"tcp": "connected:netns"}
    assert sandbox.exec_run(["getent", "hosts", "rotation-proof.sandstack.test"]).exit_code == 2
    wait_until(lambda: f"DST={inet.ip} " in _cat(net, LOG) or None, 10, what="a connection in the new log")
    wait_until(lambda: "rotation-proof.sandstack.test" in _cat(net, dns_log) or None, 10,
               what="a lookup in the new DNS log")


def test_one_pool_cannot_fill_the_hosts_conntrack_table(net, receiver):
    boxes, inet = [net.sandbox("bulk", 0), net.sandbox("bulk", 1)], net.extra["inet"]
    baseline, peak, sent = int(CONNTRACK_COUNT.read_text()), [0], {}
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], int(CONNTRACK_COUNT.read_text()))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    # Each sandbox to its own port: the namespace sees the host's address for both (masquerade).
    floods = [threading.Thread(target=lambda i=i, b=b: sent.__setitem__(b.name, _flood(b, inet.ip, FLOOD_PORT + i)))
              for i, b in enumerate(boxes)]
    sampler.start()
    for flood in floods:
        flood.start()
    for flood in floods:
        flood.join()
    time.sleep(1)
    done.set()
    sampler.join()
    arrived = receiver()
    per_box = {b.name: len({s for p, s in arrived if p == FLOOD_PORT + i}) for i, b in enumerate(boxes)}
    print(f"conntrack: {baseline} before, {peak[0]} at most during the flood; sent {sent}, arrived {per_box}")
    assert all(n > 5 * BULK["pool_open"] for n in sent.values()), sent  # each sandbox did flood
    assert all(n <= BULK["open"] for n in per_box.values()), per_box  # a sandbox's own bound
    assert sum(per_box.values()) <= BULK["pool_open"], per_box  # the pool's
    # The table grew by the pool's bound at most (and what the rest of this machine did meanwhile).
    assert peak[0] - baseline <= BULK["pool_open"] + 200, (baseline, peak[0])
    _settled(baseline)


def test_the_gateways_lookups_are_logged_and_checked_by_a_logging_resolver(net):
    gateway, listed = net.gateway, net.sandbox("listed")
    guard = net.deployment.leak_guard
    assert guard is not None
    leaked = guard.dropped()
    log = "/var/log/sandstack/dns/_gateway.log"
    # A request for an allowed name: squid resolves it through Docker's resolver, which sends it to the logging
    # resolver, which forwards it (to the test host's loopback, where nothing answers).
    listed.exec_run(["curl", "-s", "-m", "5", "-x", f"http://sandstack-gateway:{net.gateway_port('listed')}",
                     "http://allowed.sandstack.test/"])
    line = wait_until(lambda: next((l for l in _cat(net, log).splitlines()
                                    if "query[A] allowed.sandstack.test from " in l), None), 10,
                      what="the gateway's lookup in its resolver's log")
    assert f"from {net.ip(gateway, 'egress')}" in line, line
    # A name no gateway pool may reach: refused by the resolver itself, never sent on.
    assert gateway.exec_run(["getent", "hosts", "denied.sandstack.test"]).exit_code == 2
    wait_until(lambda: "config denied.sandstack.test is NXDOMAIN" in _cat(net, log) or None, 10,
               what="the refusal in the gateway resolver's log")
    assert "forwarded denied.sandstack.test" not in _cat(net, log)
    # Nothing went to the machine's upstream resolvers (the leak guard would have dropped and counted it).
    assert guard.dropped() == leaked == 0
