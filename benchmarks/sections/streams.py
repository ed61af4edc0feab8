"""Issue 23's figures (Docker): processes, files and terminals through the runtime, beside what a platform would
use without it.

- first streamed byte: a process prints its wall-clock time (ns, `date +%s%N`: the container reads the host's
  clock) every 100 ms; the client notes when each line arrives; the difference is the delay the runtime adds
  (Docker's exec stream, the runtime's reader, SSE over HTTP).
- blocking exec round trip of `true`, through the runtime and with the Docker SDK's `exec_run` as the sandbox's
  user, alternating, paired.
- 100 MiB download and upload of one file (urandom: nothing compresses) through the runtime, beside `docker cp` of
  the same file out of and into the same disk workspace (docker cp cannot see tmpfs paths, moby/moby#22020) and
  the Docker CLI's `docker exec` stream of it as the sandbox's user; several rounds, a ratio per round.
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


def _timed(argv: list[str], stdin=None, stdout=subprocess.DEVNULL) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE)
    return time.perf_counter() - started


def _transfer(box, container: str, tmp: Path, count: int) -> dict[str, list[float]]:
    """Seconds for each way, `count` rounds: through the runtime, with `docker cp`, and with the Docker CLI's own exec
    stream (`docker exec -i … cat`, as the sandbox's user): the way any path that keeps the sandbox's user and
    confinement moves bytes, so what the runtime's relay costs is told apart from what Docker's exec stream does."""
    source = tmp / "big.bin"
    source.write_bytes(os.urandom(SIZE))
    user = ["docker", "exec", "-u", "10001:10001", "-w", "/workspace"]
    times: dict[str, list[float]] = {key: [] for key in ("upload", "download", "cp_in", "cp_out", "cli_in", "cli_out")}
    for _ in range(count):  # each way's three paths back to back, so a round's ratios see the same machine
        started = time.perf_counter()
        box.upload("up.bin", source)  # file to file, as `docker cp` moves it
        times["upload"].append(time.perf_counter() - started)
        times["cp_in"].append(_timed(["docker", "cp", str(source), f"{container}:/workspace/cp.bin"]))
        with source.open("rb") as stdin:
            times["cli_in"].append(_timed([*user, "-i", container, "sh", "-c", "cat > cli.bin"], stdin=stdin))
        started = time.perf_counter()
        assert box.download("up.bin", tmp / "down.bin") == SIZE
        times["download"].append(time.perf_counter() - started)
        times["cp_out"].append(_timed(["docker", "cp", f"{container}:/workspace/cp.bin", str(tmp / "back.bin")]))
        with (tmp / "back.bin").open("wb") as stdout:
            times["cli_out"].append(_timed([*user, container, "cat", "cli.bin"], stdout=stdout))
        box.exec(["rm", "-f", "up.bin", "cp.bin", "cli.bin"])  # the disk workspace holds 512 MiB
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
            moved = _transfer(box, box.name, Path(tmp), ctx.rounds(5, 2))
            echo = _echo(box, count)
            box.release()
            api.close()
        finally:
            harness.teardown()
    mib = SIZE / (1024 * 1024)
    ctx.log(f"streams: first byte p50 {statistics.median(first):.1f} ms; exec {statistics.median(runtime_exec):.1f} "
            f"vs {statistics.median(sdk_exec):.1f} ms; transfer s (median) { {k: round(statistics.median(v), 3) for k, v in moved.items()} }; echo p50 {statistics.median(echo):.1f} ms")
    rate = lambda key: stat([mib / seconds for seconds in moved[key]])  # noqa: E731
    # A throughput ratio per round: the other path's seconds over the runtime's (or the CLI's), both in that round.
    ratio = lambda base, path: stat([b / p for b, p in zip(moved[base], moved[path])])  # noqa: E731
    result.figures += [
        Figure("streams.first_byte_p50_ms", "first streamed byte after the command writes it (SSE)", "ms",
               stat(first), Goal("<=", 20)),
        Figure("streams.exec_ms", "blocking exec `true` through the runtime", "ms", stat(runtime_exec)),
        Figure("streams.sdk_exec_ms", "the same with the Docker SDK's exec_run", "ms", stat(sdk_exec)),
        Figure("streams.exec_ratio", "runtime exec / SDK exec_run, pair by pair", "×",
               stat([a / b for a, b in zip(runtime_exec, sdk_exec)]), Goal("<=", 1.1)),
        Figure("streams.download_mib_s", "100 MiB download through the runtime", "MiB/s", rate("download")),
        Figure("streams.download_ratio", "download / docker cp out (throughput)", "×", ratio("cp_out", "download"),
               Goal(">=", 0.8)),
        Figure("streams.cli_out_ratio", "docker exec cat (CLI, no runtime) / docker cp out", "×",
               ratio("cp_out", "cli_out")),
        Figure("streams.upload_mib_s", "100 MiB upload through the runtime", "MiB/s", rate("upload")),
        Figure("streams.upload_ratio", "upload / docker cp in (throughput)", "×", ratio("cp_in", "upload"),
               Goal(">=", 0.8)),
        Figure("streams.cli_in_ratio", "docker exec -i cat (CLI, no runtime) / docker cp in", "×",
               ratio("cp_in", "cli_in")),
        Figure("streams.pty_echo_p50_ms", "terminal keystroke echo (WebSocket, PTY)", "ms", stat(echo),
               Goal("<=", 10)),
    ]
    return result
