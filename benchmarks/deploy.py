"""Benchmark: applying a stack to the local Docker daemon through the engine harness.

    .venv/bin/python benchmarks/deploy.py [--replicas 4]

The harness (tests/engine/harness) stands in for the pulumi-docker provider, so this measures the
components' registrations as applied by the Docker SDK on this machine, not a real `pulumi up`. Cases:
first apply (images built from a warm layer cache), a second apply of the same spec (must change
nothing), one more replica per pool, and destroy. Uses the locally built test images; nothing is pulled.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import docker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.engine import images  # noqa: E402
from tests.engine.deploy import Deployment, engine_spec  # noqa: E402
from tests.engine.harness.harness import Harness  # noqa: E402


def spec(busybox: str, debian: str, replicas: int) -> str:
    sleeper = ["sh", "-c", "while true; do sleep 3600; done"]
    templates = {
        "closed": {"base_image": busybox, "command": sleeper},
        "listed": {"base_image": busybox, "command": sleeper,
                   "network": {"egress": "allow-list", "allow": ["api.example.com", "*.example.org"]}},
        "open": {"base_image": busybox, "command": sleeper, "network": {"egress": "allow-all"},
                 "ports": [{"port": 8000, "exposure": "host"}]},
        "direct": {"base_image": busybox, "command": sleeper, "network": {"egress": "allow-all", "log": False}},
    }
    for template in templates.values():
        template["limits"] = {"cpus": 0.25, "memory": "64MiB", "disk": "64MiB"}
    pools = {name: {"template": name, "hosts": ["local"], "replicas": replicas} for name in templates}
    return engine_spec(debian, templates, pools)


def timed(label: str, action) -> object:
    start = time.perf_counter()
    result = action()
    elapsed = time.perf_counter() - start
    summary = getattr(result, "summary", None)
    counts = summary() if callable(summary) else ""
    print(f"{label:34} {elapsed:8.1f} s   {counts}", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", type=int, default=4)
    args = parser.parse_args()
    client = docker.from_env()
    busybox, debian = images.busybox_image(client), images.debian_image(client)
    with tempfile.TemporaryDirectory() as tmp:
        harness = Harness()
        deployment = Deployment(harness, Path(tmp))
        try:
            print(f"4 pools × {args.replicas} sandboxes + guard + gateway on the local daemon", flush=True)
            timed("first apply", lambda: deployment.up(spec(busybox, debian, args.replicas)))
            timed("second apply, same spec", lambda: deployment.up())
            timed("one more replica per pool", lambda: deployment.up(spec(busybox, debian, args.replicas + 1)))
            timed("destroy", harness.destroy)
        finally:
            harness.teardown()


if __name__ == "__main__":
    main()
