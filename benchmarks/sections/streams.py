"""Issue 23's figures (Docker): processes, files and terminals through the runtime, beside what a platform would
use without it.

- first streamed byte: a process prints its wall-clock time (ns, `date +%s%N`: the container reads the host's
  clock) every 100 ms; the client notes when each line arrives; the difference is the delay the runtime adds
  (Docker's exec stream, the runtime's reader, SSE over HTTP).
- blocking exec round trip of `true`, through the runtime and with the Docker SDK's `exec_run` as the sandbox's
  user, alternating, paired.
- 100 MiB download and upload of one file (urandom: nothing compresses) through the runtime, beside `docker cp` of
  the same file out of and into the same disk workspace (docker cp cannot see tmpfs paths, moby/moby#22020).
- terminal echo: one keystroke to `cat` on the runtime's PTY until its echo comes back.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.context import Context
from benchmarks.measure import stat
from benchmarks.results import Figure, Goal, SectionResult
from benchmarks.sections import engine

TITLE = "sandbox runtime: streamed output, exec, file transfer and terminal echo (Docker)"
PORT = 17532
TOKEN = "benchmark-runtime-token-streams-0123"
SIZE = 100 * 1024 * 1024


def _spec(debian: str) -> str:
    from testbed.deploy import engine_spec  # Docker sections only: see engine.py

    data = yaml.safe_load(engine_spec(debian, {"agent": {
        "base_image": debian, "command": engine.SLEEPER, "limits": {"memory": "256MiB"}, "workdir": "/workspace",
        "filesystem": {"writable": [{"path": "/workspace", "type": "disk", "size": "512MiB"}]},
        "session": {"idle": "never", "upload_limit": "128MiB"},
    }}, {"agent": {"template": "agent", "hosts": ["local"], "replicas": 1}}))
    data["hosts"]["local"]["runtime"] = {"port": PORT, "token": {"secret": "runtimeToken"}}
    data["hosts"]["local"]["disk_workspaces"] = "1GiB"
    return yaml.safe_dump(data, sort_keys=False)


def _first_byte(box, lines: int) -> list[float]:
    proc = box.start(script=f"for i in $(seq 1 {lines}); do date +%s%N; sleep 0.1; done")
    delays = []
    for event in proc:
        now = time.time_ns()
        for line in event.text.split():
            delays.append((now - int(line)) / 1e6)
    return delays


def _transfer(box, container: str, tmp: Path) -> dict[str, float]:
    """Seconds for each way, through the runtime and with `docker cp`."""
    source = tmp / "big.bin"
    source.write_bytes(os.urandom(SIZE))
    times = {}
    started = time.perf_counter()
    box.write_file("up.bin", source.read_bytes())
    times["upload"] = time.perf_counter() - started
    started = time.perf_counter()
    data = box.read_file("up.bin")
    times["download"] = time.perf_counter() - started
    assert len(data) == SIZE
    del data
    started = time.perf_counter()
    subprocess.run(["docker", "cp", str(source), f"{container}:/workspace/cp.bin"], check=True, capture_output=True)
    times["cp_in"] = time.perf_counter() - started
    started = time.perf_counter()
    subprocess.run(["docker", "cp", f"{container}:/workspace/cp.bin", str(tmp / "back.bin")], check=True,
                   capture_output=True)
    times["cp_out"] = time.perf_counter() - started
    return times


def _echo(box, count: int) -> list[float]:
    delays = []
    with box.terminal(command=["cat"]) as term:
        term.send("w\n")
        term.read_until("w\r\n")
        for i in range(count):
            key = "abcdefghij"[i % 10]
            started = time.perf_counter()
            term.send(key)
            term.read_until(key)
            delays.append((time.perf_counter() - started) * 1000)
    return delays


def run(ctx: Context) -> SectionResult:
    import docker

    from sandstack.client import Client
    from testbed.deploy import Deployment
    from testbed.harness.harness import Harness

    result = SectionResult("streams", TITLE)
    client = docker.from_env(timeout=120)
    imgs = engine.images(client)
    count = ctx.rounds(40, 12)
    with tempfile.TemporaryDirectory(prefix="sandstack-bench-streams-") as tmp:
        harness = Harness()
        deployment = Deployment(harness, Path(tmp), secret_config={"runtimeToken": TOKEN})
        try:
            deployment.up(_spec(imgs.debian))
            api = Client.from_outputs({"hosts": {"local": {"url": f"http://127.0.0.1:{PORT}", "token": TOKEN}},
                                       "pools": {"agent": ["local"]}})
            box = api.claim("agent", "bench-streams")
            container = client.containers.get(box.name)
            first = _first_byte(box, count)
            runtime_exec, sdk_exec = [], []
            for _ in range(count):  # alternating, so both sides see the same machine
                started = time.perf_counter()
                box.exec(["true"])
                runtime_exec.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                container.exec_run(["true"], user="10001:10001")
                sdk_exec.append((time.perf_counter() - started) * 1000)
            moved = _transfer(box, box.name, Path(tmp))
            echo = _echo(box, count)
            box.release()
            api.close()
        finally:
            harness.teardown()
    mib = SIZE / (1024 * 1024)
    ctx.log(f"streams: first byte p50 {statistics.median(first):.1f} ms; exec {statistics.median(runtime_exec):.1f} "
            f"vs {statistics.median(sdk_exec):.1f} ms; transfer {moved}; echo p50 {statistics.median(echo):.1f} ms")
    one = lambda value: stat([value])  # noqa: E731 - a single transfer each way ("run once, small")
    result.figures += [
        Figure("streams.first_byte_p50_ms", "first streamed byte after the command writes it (SSE)", "ms",
               stat(first), Goal("<=", 20)),
        Figure("streams.exec_ms", "blocking exec `true` through the runtime", "ms", stat(runtime_exec)),
        Figure("streams.sdk_exec_ms", "the same with the Docker SDK's exec_run", "ms", stat(sdk_exec)),
        Figure("streams.exec_ratio", "runtime exec / SDK exec_run, pair by pair", "×",
               stat([a / b for a, b in zip(runtime_exec, sdk_exec)]), Goal("<=", 1.1)),
        Figure("streams.download_mib_s", "100 MiB download through the runtime", "MiB/s", one(mib / moved["download"])),
        Figure("streams.download_ratio", "download / docker cp out (throughput)", "×",
               one(moved["cp_out"] / moved["download"]), Goal(">=", 0.8)),
        Figure("streams.upload_mib_s", "100 MiB upload through the runtime", "MiB/s", one(mib / moved["upload"])),
        Figure("streams.upload_ratio", "upload / docker cp in (throughput)", "×",
               one(moved["cp_in"] / moved["upload"]), Goal(">=", 0.8)),
        Figure("streams.pty_echo_p50_ms", "terminal keystroke echo (WebSocket, PTY)", "ms", stat(echo),
               Goal("<=", 10)),
    ]
    return result
