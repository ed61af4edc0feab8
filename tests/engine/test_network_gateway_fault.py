"""Proof on a real Docker engine: when the egress gateway dies, allow-list sandboxes lose all egress (fail
closed), and the gateway comes back by its restart policy.

The gateway's main process is killed from the host (`kill -9` of the container's PID 1, as an OOM kill or
a crash would), not with `docker kill`: Docker counts `docker kill` as a manual stop and its restart
policy does not restart it (docs/design/engine-findings.md d). A probe loop inside the sandbox, started
before the kill, tries every 100 ms both the proxy and a direct connection; its record shows what the
sandbox could reach during the outage, with the same clock as the host.
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import datetime

import pytest

from testbed.deploy import engine_spec
from tests.engine.net.probes import curl, template
from tests.engine.net.stack import deployed
from testbed.waiting import wait_until

pytestmark = pytest.mark.docker

# Runs inside the sandbox until /tmp/stop-probing exists (or 600 s, a bound that only ends a forgotten loop): one
# JSON line per round in /tmp/probing.jsonl with the time, the proxied result and the direct one. A proxied request
# may take 10 s and a lookup 2 s twice: on a busy machine a healthy gateway can take over a second to answer, and
# a round that failed so would be no outage.
PROBE_LOOP = r'''
import json, os, socket, sys, time, urllib.request
direct_ip, deadline = sys.argv[1], time.time() + 600
with open("/tmp/probing.jsonl", "a", buffering=1) as out:
    while not os.path.exists("/tmp/stop-probing") and time.time() < deadline:
        started = time.time()
        try:
            with urllib.request.urlopen("http://internet.test/", timeout=10) as r:
                proxied = r.status
        except Exception as e:
            proxied = type(e).__name__
        s = socket.socket(); s.settimeout(0.3)
        try:
            s.connect((direct_ip, 80)); direct = "connected"
        except OSError as e:
            direct = type(e).__name__
        finally:
            s.close()
        out.write(json.dumps({"t": started, "end": time.time(), "proxied": proxied, "direct": direct}) + "\n")
        time.sleep(0.1)
'''


@pytest.fixture(scope="module")
def net(docker_client, debian_image, harness_sweep_orphans, tmp_path_factory):
    spec = engine_spec(debian_image, {
        "listed": template(debian_image, {"egress": "allow-list", "allow": ["internet.test"]}),
    })
    with deployed(__file__, "gf", tmp_path_factory.mktemp("gateway-fault"), spec, docker_client, debian_image,
                  {"listed": 1}) as stack:
        stack.extra["web"] = stack.lab.server("web", stack.name("egress"), ["tcp:80"], aliases=["internet.test"])
        yield stack


def _timestamp(text: str) -> float:
    """Docker's RFC 3339 nanosecond timestamps as epoch seconds."""
    head, _, frac = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(head + "+00:00").timestamp() + float("0." + (frac or "0"))


def test_killed_gateway_fails_closed_and_its_restart_policy_brings_egress_back(net):
    net.proves("Container.restart", "Container.init", "Container.healthcheck", "Network.internal")
    sandbox, gateway = net.sandbox("listed"), net.gateway
    assert curl(sandbox, "http://internet.test/").status == 200  # control: egress works
    gateway.reload()
    assert gateway.attrs["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    restarts, pid = gateway.attrs["RestartCount"], gateway.attrs["State"]["Pid"]

    # RES_OPTIONS only bounds how long the loop's resolver waits for `sandstack-gateway` while the gateway
    # (and with it the alias) is gone; glibc's default would block a round for ten seconds.
    sandbox.exec_run(["python3", "-c", PROBE_LOOP, net.ip(net.extra["web"], "egress")], detach=True,
                     environment={"RES_OPTIONS": "timeout:2 attempts:2"})

    def rounds() -> list[dict]:
        out = sandbox.exec_run(["cat", "/tmp/probing.jsonl"]).output.decode()
        return [json.loads(line) for line in out.splitlines() if line.endswith("}")]

    try:
        wait_until(lambda: len(rounds()) >= 3, 10, what="three probe rounds before the fault")
        killed_at = time.time()
        os.kill(pid, signal.SIGKILL)  # the gateway's PID 1 (Docker's init); squid dies with it

        def restarted() -> bool:
            gateway.reload()
            return gateway.attrs["RestartCount"] > restarts and gateway.attrs["State"]["Running"]

        wait_until(restarted, 30, what="the gateway to be restarted by its policy")
        wait_until(lambda: curl(sandbox, "http://internet.test/", timeout=2).status == 200, 30,
                   what="egress through the restarted gateway")
        back_at = time.time()
        # Rounds are sequential: once one that started after recovery is recorded, so is the outage.
        wait_until(lambda: len([r for r in rounds() if r["t"] > back_at]) >= 3, 20,
                   what="three probe rounds after recovery")
    finally:
        sandbox.exec_run(["touch", "/tmp/stop-probing"])
    record = rounds()
    gateway.reload()
    started_again = _timestamp(gateway.attrs["State"]["StartedAt"])
    assert gateway.attrs["RestartCount"] == restarts + 1 and gateway.attrs["State"]["Pid"] != pid

    assert killed_at < started_again < back_at
    before = [r for r in record if r["end"] < killed_at]
    after = [r for r in record if r["t"] > back_at]
    assert before and all(r["proxied"] == 200 for r in before), before
    # Fail closed: rounds ran across the outage, and none that was in flight while the gateway was down got
    # out before the restarted gateway served it, neither through the proxy nor around it. Docker restarts the
    # gateway within a second, so a round may fail or may be held until the new squid answers; both are closed.
    during = [r for r in record if r["t"] < started_again and r["end"] > killed_at]
    assert during, f"no round ran across the outage: {record}"
    early = [r for r in record if r["t"] >= killed_at and r["proxied"] == 200 and r["end"] <= started_again]
    assert not early, (early, killed_at, started_again)
    assert all(r["direct"] != "connected" for r in record), [r for r in record if r["direct"] == "connected"]
    assert after and all(r["proxied"] == 200 for r in after), after
    # The egress log keeps working after the restart (same volume, a line for the new requests).
    code, log = gateway.exec_run(["tail", "-n", "1", "/var/log/squid/access.log"])
    assert code == 0 and "pool=listed" in log.decode() and "dest=internet.test:80" in log.decode()
