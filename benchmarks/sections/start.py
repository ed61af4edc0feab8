"""Item 4 (Docker): how fast a sandbox is ready, against plain `docker run`.

- create → ready of a sandstack sandbox started from its snapshot image with every default (guard marker,
  supervisor, read-only root, tmpfs, limits), vs a raw `docker run` of the same image and command to the same
  probe (an HTTP answer on the published port). Goal: ≤ 1.15×.
- a snapshot start vs running the same setup at start (a setup of ≥ 10 s, in a plain `docker run` of the base
  image): goal ≥ 20× faster.

The sandstack sandbox is made by the engine harness applying the real program (replicas 0 → 1), the raw ones
by the Docker SDK, one after the other in each round.
"""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path

from benchmarks.context import Context
from benchmarks.measure import stat
from benchmarks.results import Figure, Goal, SectionResult
from benchmarks.sections import engine

TITLE = "sandbox start (Docker)"
SETUP_SECONDS = 12  # the issue asks for a setup of at least 10 s
SETUP = [f"sleep {SETUP_SECONDS}", "mkdir -p /srv/agent"]
RATIO_GOAL = Goal("<=", 1.15)
SPEEDUP_GOAL = Goal(">=", 20.0)


def _spec(debian: str, replicas: int) -> str:
    from testbed.deploy import engine_spec  # Docker sections only: see engine.py

    template = {"base_image": debian, "snapshot": {"version": "1", "setup": SETUP}, "command": engine.SERVE,
                "ports": [{"port": engine.SERVE_PORT, "exposure": "host"}],
                "readiness": {"command": ["python3", "-c", "print('ok')"], "interval": "1s"}}
    return engine_spec(debian, {"ready": template},
                       {"ready": {"template": "ready", "hosts": ["local"], "replicas": replicas}})


def _raw(client, image: str, command: list[str]) -> float:
    """create → ready of a plain `docker run -d -p 127.0.0.1::8000 IMAGE COMMAND`."""
    name = f"sandstack-bench-raw-{secrets.token_hex(3)}"
    try:
        with engine.ReadyWatch(client, name, timeout=SETUP_SECONDS * 5) as watch:
            client.containers.run(image, command, name=name, detach=True,
                                  ports={f"{engine.SERVE_PORT}/tcp": ("127.0.0.1", None)})
            return watch.result()
    finally:
        engine.remove(client, name)


def run(ctx: Context) -> SectionResult:
    import docker

    from testbed.deploy import Deployment
    from testbed.harness.harness import Harness

    result = SectionResult("start", TITLE)
    client = docker.from_env(timeout=120)
    imgs = engine.images(client)
    count = ctx.rounds(5, 2)
    ours, raw, setup_at_start = [], [], []
    with tempfile.TemporaryDirectory(prefix="sandstack-bench-start-") as tmp:
        harness = Harness()
        deployment = Deployment(harness, Path(tmp))
        try:
            # First apply builds the snapshot (the setup runs here, once) and starts guard and gateway; the
            # sandbox it starts is a warm-up, and tells which image tag the snapshot got.
            deployment.up(_spec(imgs.debian, 1))
            sandbox = deployment.name("ready", "0")
            snapshot = client.containers.get(sandbox).attrs["Config"]["Image"]
            deployment.up(_spec(imgs.debian, 0))
            for index in range(count):
                with engine.ReadyWatch(client, sandbox) as watch:
                    deployment.up(_spec(imgs.debian, 1))
                    ours.append(watch.result())
                deployment.up(_spec(imgs.debian, 0))
                raw.append(_raw(client, snapshot, engine.SERVE))
                if index < ctx.rounds(3, 1):  # each takes the whole setup time
                    script = " && ".join(SETUP + ["exec " + " ".join(engine.SERVE)])
                    setup_at_start.append(_raw(client, imgs.debian, ["sh", "-c", script]))
                ctx.log(f"round {index + 1}/{count} start: sandstack {ours[-1]:.2f} s, raw {raw[-1]:.2f} s")
        finally:
            harness.teardown()
    result.figures += [
        Figure("start.sandstack_ready_s", "sandstack sandbox from its snapshot: create → ready", "s", stat(ours)),
        Figure("start.raw_ready_s", "raw docker run, same image: create → ready", "s", stat(raw)),
        Figure("start.ready_ratio", "sandstack / raw docker run: create → ready", "×",
               stat([a / b for a, b in zip(ours, raw)]), RATIO_GOAL),
        Figure("start.setup_at_start_s", f"docker run with the setup at start ({SETUP_SECONDS} s): → ready", "s",
               stat(setup_at_start)),
        Figure("start.snapshot_speedup", "setup at start / snapshot start (how much faster)", "×",
               stat([s / a for s, a in zip(setup_at_start, ours)]), SPEEDUP_GOAL),
    ]
    result.notes.append("Ready = an HTTP answer on the published port, polled from the host every 20 ms from "
                        "Docker's Created timestamp of the container.")
    return result
