"""Item 5 (Docker): the egress gateway's added latency and its memory under 100 concurrent clients.

- latency: sequential HTTP requests from a sandbox through the gateway (its HTTP_PROXY) to a test server
  container, vs the same requests from a plain container straight to that server; both on this host, the
  server on the stack's egress network under the alias `origin.test`. Added = p50 (and p95) through the
  gateway minus direct. Goal: ≤ 2 ms at p50.
- memory: 100 clients at once (4 sandboxes × 25 threads on the pool network, standing in for 100 sandboxes),
  sampling the gateway container's memory (usage minus page cache). Goal: ≤ 64 MiB.

Every address is on this machine: the server is a container this section starts and removes.
"""

from __future__ import annotations

import json
import secrets
import statistics
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.context import Context
from benchmarks.measure import stat
from benchmarks.results import Figure, Goal, SectionResult
from benchmarks.sections import engine

TITLE = "egress gateway (Docker)"
ORIGIN, ORIGIN_PORT = "origin.test", 8080
SANDBOXES, THREADS = 4, 25
P50_GOAL = Goal("<=", 2.0)
MEMORY_GOAL = Goal("<=", 64.0)

# Per-request latency in ms; argv: URL COUNT (env|none): through $HTTP_PROXY, or straight to the server.
LATENCY = r'''
import json, os, sys, time, urllib.request
url, count, via = sys.argv[1], int(sys.argv[2]), sys.argv[3]
proxies = {"http": os.environ["HTTP_PROXY"]} if via == "env" else {}
opener = urllib.request.build_opener(urllib.request.ProxyHandler(proxies))
out = []
for _ in range(count):
    start = time.perf_counter()
    opener.open(url, timeout=10).read()
    out.append((time.perf_counter() - start) * 1000)
print(json.dumps(out))
'''

# THREADS clients in a loop through $HTTP_PROXY for SECONDS; prints the number of answers.
LOAD = r'''
import os, sys, threading, time, urllib.request
url, threads, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": os.environ["HTTP_PROXY"]}))
done, stop = [], time.time() + seconds
def client():
    while time.time() < stop:
        opener.open(url, timeout=10).read()
        done.append(1)
workers = [threading.Thread(target=client) for _ in range(threads)]
[w.start() for w in workers]
[w.join() for w in workers]
print(len(done))
'''


def _spec(debian: str) -> str:
    from testbed.deploy import engine_spec  # Docker sections only: see engine.py

    template = {"base_image": debian, "command": engine.SLEEPER, "network": {"egress": "allow-all"},
                "limits": {"cpus": 0.25, "memory": "128MiB", "disk": "64MiB"}}
    return engine_spec(debian, {"client": template},
                       {"client": {"template": "client", "hosts": ["local"], "replicas": SANDBOXES}})


def _latencies(container, via: str, count: int) -> list[float]:
    code, out = container.exec_run(["python3", "-c", LATENCY, f"http://{ORIGIN}:{ORIGIN_PORT}/", str(count), via])
    if code != 0:
        raise RuntimeError(f"latency probe in {container.name} exited {code}: {out.decode()[-500:]}")
    return json.loads(out.decode().strip().splitlines()[-1])


def _percentile(values: list[float], pct: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]


def _memory_mib(container) -> float:
    stats = container.stats(stream=False)["memory_stats"]
    cache = (stats.get("stats") or {}).get("cache", 0)  # cgroup v1 counts page cache in usage
    return (stats.get("usage", 0) - cache) / 2**20


def _peak_under_load(client, sandboxes, gateway, seconds: float) -> tuple[float, int]:
    """The gateway's highest memory sample while every sandbox runs THREADS clients for `seconds`."""
    answered: list[int] = []

    def load(box) -> None:
        _, out = box.exec_run(["python3", "-c", LOAD, f"http://{ORIGIN}:{ORIGIN_PORT}/", str(THREADS),
                               str(seconds)])
        # A client whose connection timed out under the load reports the error instead of a count: none answered.
        last = (out.decode().strip().splitlines() or ["0"])[-1]
        answered.append(int(last) if last.isdigit() else 0)

    workers = [threading.Thread(target=load, args=(box,)) for box in sandboxes]
    for w in workers:
        w.start()
    peak = _memory_mib(gateway)
    while any(w.is_alive() for w in workers):
        peak = max(peak, _memory_mib(gateway))
        time.sleep(0.5)
    return peak, sum(answered)


def run(ctx: Context) -> SectionResult:
    import docker

    from testbed.deploy import Deployment
    from testbed.harness.harness import Harness

    result = SectionResult("gateway", TITLE)
    client = docker.from_env(timeout=120)
    imgs = engine.images(client)
    count, requests = ctx.rounds(5, 2), ctx.rounds(200, 50)
    added_p50, added_p95, peaks = [], [], []
    token = secrets.token_hex(3)
    with tempfile.TemporaryDirectory(prefix="sandstack-bench-gateway-") as tmp:
        harness = Harness()
        deployment = Deployment(harness, Path(tmp))
        extra: list = []
        try:
            deployment.up(_spec(imgs.debian))
            egress = client.networks.get(deployment.name("egress"))
            origin = client.containers.run(imgs.debian, ["python3", "-m", "http.server", str(ORIGIN_PORT)],
                                           name=f"sandstack-bench-origin-{token}", detach=True)
            extra.append(origin)
            egress.connect(origin, aliases=[ORIGIN])
            direct = client.containers.run(imgs.debian, engine.SLEEPER, name=f"sandstack-bench-direct-{token}",
                                           detach=True, network=egress.name)
            extra.append(direct)
            sandboxes = [deployment.container("client", i) for i in range(SANDBOXES)]
            gateway = client.containers.get(deployment.name("gateway"))
            _latencies(sandboxes[0], "env", 5)  # warm-up: name lookups, the gateway's first connections
            _latencies(direct, "none", 5)
            for index in range(count):
                through, straight = _latencies(sandboxes[0], "env", requests), _latencies(direct, "none", requests)
                added_p50.append(_percentile(through, 50) - _percentile(straight, 50))
                added_p95.append(_percentile(through, 95) - _percentile(straight, 95))
                peak, answered = _peak_under_load(client, sandboxes, gateway, ctx.rounds(15, 3))
                peaks.append(peak)
                ctx.log(f"round {index + 1}/{count} gateway: +{added_p50[-1]:.2f} ms p50, {peak:.1f} MiB, "
                        f"{answered} answers under load")
        finally:
            try:
                for container in reversed(extra):  # off the stack's network before the stack goes
                    engine.remove(client, container.name)
            finally:
                harness.teardown()
    result.figures += [
        Figure("gateway.added_p50_ms", "added latency through the gateway: p50", "ms", stat(added_p50), P50_GOAL),
        Figure("gateway.added_p95_ms", "added latency through the gateway: p95", "ms", stat(added_p95)),
        Figure("gateway.peak_mib", f"gateway memory, {SANDBOXES * THREADS} concurrent clients", "MiB", stat(peaks),
               MEMORY_GOAL),
    ]
    result.notes.append(f"{requests} sequential requests per side per round; a new connection per request.")
    return result
