"""Issue 39 item 3's figure (Docker): what naming a size class adds to a claim. A warm sandbox is resized with
Docker's container update before the claim answers (docs/design/sizes.md), and its release restores the pool's own
limits; a pool without classes makes neither call.

Two pools of 4 warm sandboxes of one template are applied through the engine harness, one with a class `large`
(CPUs, memory, pids) and one without. Claims are timed alone and alternate, pair by pair: a claim on the pool
without classes, then one of class `large`; each is followed by a timed release (a reset restarts the sandbox; the
sized one's also restores its limits).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.context import Context
from benchmarks.measure import stat
from benchmarks.results import Figure, SectionResult
from benchmarks.sections import engine

TITLE = "size classes: a claim that resizes its warm sandbox (Docker)"
PORT = 17552
TOKEN = "benchmark-runtime-token-sizes-0123"


def _spec(debian: str) -> str:
    from testbed.deploy import engine_spec  # Docker sections only: see engine.py

    template = {"base_image": debian, "command": engine.SLEEPER, "limits": {"memory": "128MiB", "pids": 64},
                "workdir": "/workspace", "filesystem": {"writable": [{"path": "/workspace", "size": "16MiB"}]},
                "session": {"idle": "never"}}
    pools = {"plain": {"template": "agent", "hosts": ["local"], "replicas": 4},
             "sized": {"template": "agent", "hosts": ["local"], "replicas": 4,
                       "sizes": {"large": {"cpus": 2, "memory": "256MiB", "pids": 256}}}}
    data = yaml.safe_load(engine_spec(debian, {"agent": template}, pools))
    data["hosts"]["local"]["runtime"] = {"port": PORT, "token": {"secret": "runtimeToken"}}
    return yaml.safe_dump(data, sort_keys=False)


def run(ctx: Context) -> SectionResult:
    import docker

    from sandstack.client import Client
    from testbed.deploy import Deployment
    from testbed.harness.harness import Harness

    result = SectionResult("sizes", TITLE)
    client = docker.from_env(timeout=120)
    imgs = engine.images(client)
    plain, sized, plain_release, sized_release = [], [], [], []
    count = ctx.rounds(30, 10)
    with tempfile.TemporaryDirectory(prefix="sandstack-bench-sizes-") as tmp:
        harness = Harness()
        deployment = Deployment(harness, Path(tmp), secret_config={"runtimeToken": TOKEN})
        try:
            deployment.up(_spec(imgs.debian))
            api = Client.from_outputs({"hosts": {"local": {"url": f"http://127.0.0.1:{PORT}", "token": TOKEN}},
                                       "pools": {"plain": ["local"], "sized": ["local"]}})
            for i in range(count):
                for pool, size, claims, releases in (("plain", None, plain, plain_release),
                                                     ("sized", "large", sized, sized_release)):
                    started = time.perf_counter()
                    box = api.claim(pool, f"bench-{pool}-{i}", size=size)
                    claims.append((time.perf_counter() - started) * 1000)
                    started = time.perf_counter()
                    box.release()
                    releases.append((time.perf_counter() - started) * 1000)
            api.close()
        finally:
            harness.teardown()
    ctx.log(f"sizes: claim p50 {statistics.median(plain):.1f} ms, of class large {statistics.median(sized):.1f} ms; "
            f"release {statistics.median(plain_release):.0f} ms vs {statistics.median(sized_release):.0f} ms")
    result.figures += [
        Figure("sizes.claim_ms", f"claim on a warm pool without classes (min–max of {len(plain)})", "ms", stat(plain)),
        Figure("sizes.claim_large_ms", "claim of class `large` (the warm sandbox resized before the answer)", "ms",
               stat(sized)),
        Figure("sizes.claim_added_ms", "what naming the class adds to a claim, pair by pair", "ms",
               stat([b - a for a, b in zip(plain, sized)])),
        Figure("sizes.release_ms", "release (reset) on the pool without classes", "ms", stat(plain_release)),
        Figure("sizes.release_large_ms", "release of a `large` session (reset + the pool's limits restored)", "ms",
               stat(sized_release)),
    ]
    return result
