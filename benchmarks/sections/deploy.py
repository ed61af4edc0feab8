"""Item 6 (Docker): apply / re-apply / destroy of 4 pools × 4 sandboxes through the engine harness, beside
the same containers made with plain `docker run` calls.

The harness stands in for the pulumi-docker provider (no Pulumi CLI here), so this measures the program's
registrations applied by the Docker SDK, not a real `pulumi up`. Cases: first apply (images built from a warm
layer cache), a second apply of the same spec (changes nothing), one more replica per pool, destroy. The plain
side: one network per pool and the 16 containers with the same image, command and limits, then removal —
what a user scripting Docker by hand would run, without guard, gateway or snapshot images. No goals: the
figures say what sandstack's extra objects and checks cost.
"""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path

from benchmarks.context import Context
from benchmarks.measure import stat
from benchmarks.results import Figure, SectionResult
from benchmarks.sections import engine

TITLE = "deploy through the engine harness (Docker)"
POOLS, REPLICAS = 4, 4
LIMITS = {"cpus": 0.25, "memory": "64MiB", "disk": "64MiB"}


def _spec(busybox: str, debian: str, replicas: int) -> str:
    from testbed.deploy import engine_spec  # Docker sections only: see engine.py

    templates = {
        "closed": {"base_image": busybox, "command": engine.SLEEPER},
        "listed": {"base_image": busybox, "command": engine.SLEEPER,
                   "network": {"egress": "allow-list", "allow": ["api.example.com", "*.example.org"]}},
        "open": {"base_image": busybox, "command": engine.SLEEPER, "network": {"egress": "allow-all"},
                 "ports": [{"port": 8000, "exposure": "host"}]},
        "direct": {"base_image": busybox, "command": engine.SLEEPER,
                   "network": {"egress": "allow-all", "log": False}},
    }
    for template in templates.values():
        template["limits"] = dict(LIMITS)
    pools = {name: {"template": name, "hosts": ["local"], "replicas": replicas} for name in templates}
    return engine_spec(debian, templates, pools)


def _plain(client, busybox: str) -> tuple[float, float]:
    """(create, remove) seconds for POOLS networks and POOLS × REPLICAS containers by plain SDK calls."""
    token = secrets.token_hex(3)
    networks, containers = [], []

    def create() -> None:
        for p in range(POOLS):
            networks.append(client.networks.create(f"sandstack-bench-plain-{token}-{p}", driver="bridge",
                                                   internal=p == 0))
            for r in range(REPLICAS):
                containers.append(client.containers.run(
                    busybox, engine.SLEEPER, name=f"sandstack-bench-plain-{token}-{p}-{r}", detach=True,
                    network=networks[-1].name, nano_cpus=int(LIMITS["cpus"] * 1e9), mem_limit="64m",
                    memswap_limit="64m", read_only=True, tmpfs={"/tmp": "size=64m"}, pids_limit=128,
                    cap_drop=["ALL"], security_opt=["no-new-privileges"], user="10001:10001"))

    def destroy() -> None:
        for container in containers:
            container.remove(force=True)
        for network in networks:
            network.remove()

    try:
        made = engine.timed(create)
    finally:
        gone = engine.timed(destroy)
    return made, gone


def run(ctx: Context) -> SectionResult:
    import docker

    from testbed.deploy import Deployment
    from testbed.harness.harness import Harness

    result = SectionResult("deploy", TITLE)
    client = docker.from_env(timeout=120)
    imgs = engine.images(client)
    times: dict[str, list[float]] = {k: [] for k in ("apply", "reapply", "scale", "destroy", "plain", "plain_rm")}
    count = ctx.rounds(3, 1)
    for index in range(count):
        with tempfile.TemporaryDirectory(prefix="sandstack-bench-deploy-") as tmp:
            harness = Harness()
            deployment = Deployment(harness, Path(tmp))
            try:
                times["apply"].append(engine.timed(lambda: deployment.up(_spec(imgs.busybox, imgs.debian, REPLICAS))))
                times["reapply"].append(engine.timed(lambda: deployment.up()))
                times["scale"].append(engine.timed(
                    lambda: deployment.up(_spec(imgs.busybox, imgs.debian, REPLICAS + 1))))
                times["destroy"].append(engine.timed(harness.destroy))
            finally:
                harness.teardown()
        made, gone = _plain(client, imgs.busybox)
        times["plain"].append(made)
        times["plain_rm"].append(gone)
        ctx.log(f"round {index + 1}/{count} deploy: apply {times['apply'][-1]:.1f} s, plain {made:.1f} s")
    n = f"{POOLS} pools × {REPLICAS}"
    result.figures += [
        Figure("deploy.apply_s", f"first apply, {n} + guard + gateway", "s", stat(times["apply"])),
        Figure("deploy.reapply_s", "second apply, same spec (no changes)", "s", stat(times["reapply"])),
        Figure("deploy.scale_s", "one more replica per pool", "s", stat(times["scale"])),
        Figure("deploy.destroy_s", "destroy", "s", stat(times["destroy"])),
        Figure("deploy.plain_create_s", f"plain docker run: {POOLS} networks + {POOLS * REPLICAS} containers", "s",
               stat(times["plain"])),
        Figure("deploy.plain_remove_s", "plain docker rm of the same", "s", stat(times["plain_rm"])),
        Figure("deploy.apply_vs_plain", "first apply / plain docker run", "×",
               stat([a / b for a, b in zip(times["apply"], times["plain"])])),
    ]
    return result
