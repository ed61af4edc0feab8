"""Issue 22's figures (Docker): a claim that creates a sandbox on demand beside a raw `docker run` of the same image
to the same readiness probe, and hibernate → resume to a working exec of a 256 MiB sandbox, with the memory the
hibernation freed (docs/design/ondemand.md).

A stack with a runtime and one pool (1 warm sandbox, ceiling 2) is applied through the engine harness. The on-demand
claims are timed alone (each followed by an untimed release, which retires the sandbox); the raw runs alternate with
them, so both see the same machine: `docker run -d` with the template's probe, then the same wait as the runtime's
(Docker's `healthy`, or the probe's command exec'd as soon as the container runs: sandstack.runtime.readiness);
a second raw run waits for Docker's first scheduled check alone, for reference. A third creates the very container
the runtime creates (the create body of the pool's place, read from the runtime's own configuration; sandstack's
labels replaced, so neither the runtime nor the host guard takes it for theirs) with the same wait: the runtime's own
cost, which the goal is held against (a bare `docker run` has no sandbox settings: no network of its own, tmpfs
paths, capabilities, pids parent...). Both ratios are reported.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.context import Context
from benchmarks.measure import stat
from benchmarks.results import Figure, Goal, SectionResult
from benchmarks.sections import engine

TITLE = "sandbox runtime: on-demand claims and hibernation (Docker)"
PORT = 17534
TOKEN = "benchmark-runtime-token-ondemand-01"
PROBE = {"command": ["true"], "interval": "1s"}
MIB = 1024 * 1024


def _spec(debian: str) -> str:
    from testbed.deploy import engine_spec  # Docker sections only: see engine.py

    data = yaml.safe_load(engine_spec(debian, {"agent": {
        "base_image": debian, "command": engine.SLEEPER, "limits": {"memory": "256MiB"}, "workdir": "/workspace",
        "readiness": PROBE, "filesystem": {"writable": [{"path": "/workspace", "size": "16MiB"}]},
        "session": {"idle": "never"},
    }}, {"agent": {"template": "agent", "hosts": ["local"], "replicas": 1, "max": 2}}))
    data["hosts"]["local"]["runtime"] = {"port": PORT, "token": {"secret": "runtimeToken"}}
    return yaml.safe_dump(data, sort_keys=False)


def _raw_run(client, image: str, *, probe_here: bool) -> float:
    """ms from `docker run -d` to ready: with `probe_here`, what the runtime waits for (Docker's `healthy`, or the
    probe's command exec'd as soon as the container runs, every 0.1 s); else Docker's first `healthy` alone."""
    started = time.perf_counter()
    container = client.containers.run(image, engine.SLEEPER, detach=True, mem_limit="256m", labels={
        "sandstack.benchmark": "ondemand"}, healthcheck={"test": ["CMD", *PROBE["command"]], "interval": 10**9,
                                                         "timeout": 10**9, "retries": 3})
    try:
        _until_ready(client, container, probe_here=probe_here)
        return (time.perf_counter() - started) * 1000
    finally:
        container.remove(force=True)


def _until_ready(client, container, *, probe_here: bool) -> None:
    """Docker's `healthy`, or (`probe_here`) the probe's command exec'd as soon as it runs, every 0.1 s."""
    probed = 0.0
    while True:
        state = client.api.inspect_container(container.id)["State"]
        if state.get("Health", {}).get("Status") == "healthy":
            return
        if probe_here and state["Status"] == "running" and time.perf_counter() - probed >= 0.1:
            probed = time.perf_counter()
            if container.exec_run(PROBE["command"]).exit_code == 0:
                return
        time.sleep(0.05)


def _same_body(client, body: dict) -> float:
    """ms from creating the runtime's own container body (under another name) to ready, waited for as the runtime
    waits (the probe's command exec'd as soon as it runs, every 0.1 s)."""
    from sandstack.spec.contract import LABEL_PREFIX

    body = dict(body)
    body["Labels"] = {key: value for key, value in (body.get("Labels") or {}).items()
                      if not key.startswith(LABEL_PREFIX)} | {"sandstack.benchmark": "ondemand"}
    name = f"sandstack-bench-same-body-{time.monotonic_ns()}"
    started = time.perf_counter()
    api = client.api
    api._result(api._post_json(api._url("/containers/create"), data=body, params={"name": name}), json=True)
    try:
        api.start(name)
        _until_ready(client, client.containers.get(name), probe_here=True)
        return (time.perf_counter() - started) * 1000
    finally:
        api.remove_container(name, force=True)


def _slot_body(client, deployment) -> dict:
    """The create body of the pool's on-demand place, from the configuration the runtime reads."""
    from sandstack.plan.runtime import ENV_CONFIG_TEXT, RuntimeConfig
    from sandstack.spec.contract import CONFIG_DIR, CONFIG_WANT

    # The configuration set in force: `want` links to its folder (docs/design/live-changes.md).
    runtime = client.containers.get(deployment.name("runtime"))
    text = runtime.exec_run(["cat", f"{CONFIG_DIR}/{CONFIG_WANT}/{ENV_CONFIG_TEXT}"]).output.decode()
    config = RuntimeConfig.from_json(text)
    ondemand = config.pools["agent"].ondemand
    return ondemand.body(next(iter(ondemand.places)))


def _memory(client, name: str) -> float:
    """MiB the container's cgroup holds now (0 when it does not run)."""
    try:
        stats = client.api.stats(name, stream=False)
    except Exception:  # noqa: BLE001 -- a removed container holds nothing
        return 0.0
    return (stats.get("memory_stats") or {}).get("usage", 0) / MIB


def _wait_answers(host, timeout: float) -> None:
    """Until the runtime answers: the apply ends when its container runs, and a runtime that starts slowly (a loaded
    machine, an image just built) refused the first claim's connection three times (the client's tries) once."""
    from sandstack.client import HostUnavailable

    deadline = time.monotonic() + timeout
    while True:
        try:
            host.pools()
            return
        except HostUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def run(ctx: Context) -> SectionResult:
    import docker

    from sandstack.client import Client
    from testbed.deploy import Deployment
    from testbed.harness.harness import Harness

    result = SectionResult("ondemand", TITLE)
    client = docker.from_env(timeout=120)
    imgs = engine.images(client)
    created, raw, raw_docker, same, resumed, held, freed = [], [], [], [], [], [], []
    count = ctx.rounds(8, 3)
    with tempfile.TemporaryDirectory(prefix="sandstack-bench-ondemand-") as tmp:
        harness = Harness()
        deployment = Deployment(harness, Path(tmp), secret_config={"runtimeToken": TOKEN})
        try:
            deployment.up(_spec(imgs.debian))
            api = Client.from_outputs({"hosts": {"local": {"url": f"http://127.0.0.1:{PORT}", "token": TOKEN}},
                                       "pools": {"agent": ["local"]}}, timeout=120)
            _wait_answers(api.host("local"), timeout=120)
            warm = api.claim("agent", "bench-warm")  # held: every claim below creates the on-demand one
            body = _slot_body(client, deployment)
            for i in range(count):
                started = time.perf_counter()
                box = api.claim("agent", f"bench-od-{i}")
                created.append((time.perf_counter() - started) * 1000)
                box.release()
                raw.append(_raw_run(client, imgs.debian, probe_here=True))
                raw_docker.append(_raw_run(client, imgs.debian, probe_here=False))
                same.append(_same_body(client, body))  # after the release: the place's container is gone
            for i in range(count):
                warm.exec(["sh", "-c", "nohup python3 -c 'x = bytearray(96 * 2**20); import time; "
                                       "time.sleep(10**6)' >/dev/null 2>&1 &"])
                time.sleep(1)
                held.append(_memory(client, warm.name))
                warm.hibernate()
                freed.append(held[-1] - _memory(client, warm.name))
                started = time.perf_counter()
                warm.resume()
                warm.exec(["true"])
                resumed.append((time.perf_counter() - started) * 1000)
            warm.release()
            api.close()
        finally:
            harness.teardown()
    ratios = [a / b for a, b in zip(created, raw)]
    same_ratios = [a / b for a, b in zip(created, same)]
    ctx.log(f"ondemand: claim {min(created):.0f} ms vs docker run {min(raw):.0f} ms, the same container "
            f"{min(same):.0f} ms; resume {min(resumed):.0f} ms; "
            f"freed {min(freed):.0f} MiB")
    result.figures += [
        Figure("ondemand.claim_ms", f"claim creating a sandbox on demand, to healthy ({len(created)} runs)", "ms",
               stat(created)),
        Figure("ondemand.docker_run_ms", "raw `docker run -d` of the same image to the same probe, run as the "
               "runtime runs it", "ms", stat(raw)),
        Figure("ondemand.docker_run_first_check_ms", "raw `docker run -d` to Docker's first `healthy`", "ms",
               stat(raw_docker)),
        Figure("ondemand.same_body_ms", "the runtime's own container body created and started by hand, to the same "
               "probe", "ms", stat(same)),
        Figure("ondemand.claim_ratio", "on-demand claim / bare `docker run -d`, pair by pair", "×", stat(ratios)),
        Figure("ondemand.claim_same_body_ratio", "on-demand claim / the same container created by hand, pair by "
               "pair", "×", stat(same_ratios), Goal("<=", 1.2)),
        Figure("ondemand.resume_ms", "hibernate → resume to a working exec, 256 MiB sandbox", "ms", stat(resumed),
               Goal("<=", 2000)),
        Figure("ondemand.memory_held_mib", "memory the sandbox held before hibernating", "MiB", stat(held)),
        Figure("ondemand.memory_freed_mib", "memory freed by hibernating (held − after)", "MiB", stat(freed)),
    ]
    return result
