"""Issue 12's figures (Docker): the runtime's claim latency on a warm pool, and an exec's round trip through the
runtime beside the same command run with the Docker SDK's `exec_run` (what a platform would call without it).

A stack with a runtime and one pool of 4 sandboxes is applied through the engine harness (see engine.py); the
client talks to the runtime over HTTP on the host's loopback, as an agent platform on the host would. Claims are
timed alone: each is followed by an untimed release (a reset restarts the sandbox).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.context import Context
from benchmarks.measure import Stat, stat
from benchmarks.results import Figure, Goal, SectionResult
from benchmarks.sections import engine

TITLE = "sandbox runtime: claim latency and exec round trip (Docker)"
PORT = 17499
TOKEN = "benchmark-runtime-token-0123456789"


def _spec(debian: str) -> str:
    from testbed.deploy import engine_spec  # Docker sections only: see engine.py

    data = yaml.safe_load(engine_spec(debian, {"agent": {
        "base_image": debian, "command": engine.SLEEPER, "limits": {"memory": "128MiB"}, "workdir": "/workspace",
        "filesystem": {"writable": [{"path": "/workspace", "size": "16MiB"}]}, "session": {"idle": "never"},
    }}, {"agent": {"template": "agent", "hosts": ["local"], "replicas": 4}}))
    data["hosts"]["local"]["runtime"] = {"port": PORT, "token": {"secret": "runtimeToken"}}
    return yaml.safe_dump(data, sort_keys=False)


def _percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def run(ctx: Context) -> SectionResult:
    import docker

    from sandstack.client import Client
    from testbed.deploy import Deployment
    from testbed.harness.harness import Harness

    result = SectionResult("runtime", TITLE)
    client = docker.from_env(timeout=120)
    imgs = engine.images(client)
    claims, runtime_exec, sdk_exec = [], [], []
    count = ctx.rounds(40, 12)
    with tempfile.TemporaryDirectory(prefix="sandstack-bench-runtime-") as tmp:
        harness = Harness()
        deployment = Deployment(harness, Path(tmp), secret_config={"runtimeToken": TOKEN})
        try:
            deployment.up(_spec(imgs.debian))
            api = Client.from_outputs({"hosts": {"local": {"url": f"http://127.0.0.1:{PORT}", "token": TOKEN}},
                                       "pools": {"agent": ["local"]}})
            for i in range(count):
                started = time.perf_counter()
                box = api.claim("agent", f"bench-{i}")
                claims.append((time.perf_counter() - started) * 1000)
                box.release()
            box = api.claim("agent", "bench-exec")
            container = client.containers.get(box.name)
            for _ in range(count):  # alternating, so both sides see the same machine
                started = time.perf_counter()
                box.exec(["true"])
                runtime_exec.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                container.exec_run(["true"], user="10001:10001")
                sdk_exec.append((time.perf_counter() - started) * 1000)
            box.release()
            api.close()
        finally:
            harness.teardown()
    ctx.log(f"runtime: claim p50 {statistics.median(claims):.1f} ms, exec {statistics.median(runtime_exec):.1f} ms "
            f"vs exec_run {statistics.median(sdk_exec):.1f} ms")
    p95 = _percentile(claims, 95)
    result.figures += [
        Figure("runtime.claim_p50_ms", f"claim on a warm pool of 4, p50 (min–max of {len(claims)})", "ms",
               stat(claims), Goal("<=", 50)),
        Figure("runtime.claim_p95_ms", "claim, p95", "ms", Stat(p95, p95, p95, len(claims))),
        Figure("runtime.exec_ms", "exec `true` through the runtime (HTTP, token, audit)", "ms", stat(runtime_exec)),
        Figure("runtime.sdk_exec_ms", "the same with the Docker SDK's exec_run", "ms", stat(sdk_exec)),
        Figure("runtime.exec_ratio", "runtime exec / SDK exec_run, pair by pair", "×",
               stat([a / b for a, b in zip(runtime_exec, sdk_exec)]), Goal("<=", 1.2)),
    ]
    return result
