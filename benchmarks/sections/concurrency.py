"""Issue 22's concurrency figure (Docker): many concurrent sessions over one host's pools, warm and on demand, and
the claim latency of the warm hits.

A stack with a runtime and two pools is applied through the engine harness: each pool has `WARM` warm sandboxes
and a ceiling `ONDEMAND` above them. Two rounds, each holding every session at once, half of them on each pool:
- **burst**: every claim is sent in the same instant: the worst case, where the runtime's CPU per claim (one Python
  process) queues every claim behind the others. Each claim has a connection of its own, opened (and used once, for
  `GET /healthz`) before the instant, and its request serialised before it; then the requests are written one after
  another (all 200 within a few milliseconds) and the answers read as they come (benchmarks.burst). A claim's time
  runs from the write of ITS request to its answer's last byte: the network and the runtime, nothing else. Until
  2026-12-06 this round ran one thread per claim in this one process, released by a barrier, each sending through
  sandstack.client (httpx); a claim's client work is ~0.85 ms of CPU under the one interpreter lock, so the 200th
  thread could not write its request before ~170 ms of the other threads' client work, and its clock ran meanwhile:
  the figure measured the load generator as much as the runtime (200 platforms' sessions do not share one
  interpreter). The claims, their pools, their instant and the goal are the same;
- **spread**: the claims arrive evenly over `SPREAD_S` seconds (one thread each, started on its schedule, through
  sandstack.client), and every session stays bound until all are claimed: as many concurrent sessions, arriving as
  a platform's chats do. Unchanged: at 20 claims a second the client's threads do not queue behind each other.
The claims that got a warm sandbox are the warm hits (their p50 and p99 are the figures), the others created one
on demand (their time is reported too: it is Docker's). Each round starts once every warm sandbox is idle (the
runtime takes them into service as the apply creates them, and resets each one a release gave back). Releases are
untimed. The readiness probe runs every 30 s: Docker's health check is an exec, and one a second in each of 200
sandboxes was most of the machine's load (the runtime runs the probe itself while a new sandbox starts, so the
interval does not delay a creation). `--quick` runs 40 sessions (16 warm + 4 on demand per pool), a full run 200 (80 + 20 per pool).
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from benchmarks.context import Context
from benchmarks.measure import Stat, stat
from benchmarks.results import Figure, Goal, SectionResult
from benchmarks.sections import engine

TITLE = "sandbox runtime: concurrent sessions over one host's pools, warm and on demand (Docker)"
PORT = 17537
TOKEN = "benchmark-runtime-token-concurrency-1"
POOLS = ("alpha", "beta")
SPREAD_S = 10.0  # the spread round's claims arrive over this long (200 sessions: 20 a second)


def _sizes(ctx: Context) -> tuple[int, int]:
    """(warm, on demand) per pool."""
    return (16, 4) if ctx.quick else (80, 20)


def _spec(debian: str, warm: int, ondemand: int) -> str:
    from testbed.deploy import engine_spec  # Docker sections only: see engine.py

    template = {"base_image": debian, "command": engine.SLEEPER, "limits": {"memory": "64MiB", "cpus": 0.1, "disk": "64MiB"},
                "workdir": "/workspace", "filesystem": {"writable": [{"path": "/workspace", "size": "4MiB"}]},
                "readiness": {"command": ["true"], "interval": "30s"}, "session": {"idle": "never"}}
    pools = {pool: {"template": "agent", "hosts": ["local"], "replicas": warm, "max": warm + ondemand}
             for pool in POOLS}
    data = yaml.safe_load(engine_spec(debian, {"agent": template}, pools,
                                      capacity={"cpus": 4, "memory": "16GiB", "disk": "40GiB"}))
    data["hosts"]["local"]["runtime"] = {"port": PORT, "token": {"secret": "runtimeToken"}}
    return yaml.safe_dump(data, sort_keys=False)


def _wait_idle(host, warm: int, timeout: float) -> tuple[float, dict[str, str]]:
    """(seconds until `warm` sandboxes are idle, {sandbox: status (detail)} of the others at the first look)."""
    started = time.monotonic()
    first: dict[str, str] | None = None
    while True:
        rows = host.sandboxes()
        others = {r["sandbox"]: r["status"] + (f" ({r['detail']})" if r.get("detail") else "") for r in rows
                  if r["status"] not in ("idle", "absent")}
        first = others if first is None else first
        if sum(r["status"] == "idle" for r in rows) >= warm:
            return time.monotonic() - started, first
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"warm sandboxes not idle within {timeout:g} s: {others}")
        time.sleep(0.5)


def _percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def _claims(host, sessions: list[tuple[str, str]], spread_s: float | None,
            pid: int | None = None) -> tuple[dict, list[str], dict, dict | None]:
    """Claims every session: all in one instant (benchmarks.burst), or evenly over `spread_s` seconds, each on a
    thread of its own through sandstack.client. ({session: (ms, replica)}, failures, {session: sandbox}, and for a
    burst the CPU of the machine and of process `pid`'s cgroup (the runtime's container) while it ran)."""
    if spread_s is None:
        return _burst(host, sessions, pid)
    timings: dict[str, tuple[float, int]] = {}
    failures: list[str] = []
    sandbox_of: dict[str, str] = {}
    barrier = threading.Barrier(len(sessions))

    def claim(index: int, pool: str, session: str) -> None:
        barrier.wait()
        time.sleep(index * spread_s / len(sessions))
        started = time.perf_counter()
        try:
            info = host.claim(pool, session)
        except Exception as error:  # noqa: BLE001 -- counted and reported, the others go on
            failures.append(f"{session}: {error}")
            return
        timings[session] = ((time.perf_counter() - started) * 1000, int(info["sandbox"].rsplit("-", 1)[1]))
        sandbox_of[session] = info["sandbox"]

    threads = [threading.Thread(target=claim, args=(i, *s)) for i, s in enumerate(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return timings, failures, sandbox_of, None


def _burst(host, sessions: list[tuple[str, str]], pid: int | None = None) -> tuple[dict, list[str], dict, dict]:
    """Every claim written in one instant on a connection of its own, as sandstack.client's claim sends it (the same
    body and token); a claim's time is its request's write to its answer (benchmarks.burst). The CPU sampled
    meanwhile: {"sampler": CpuSampler, "ends": {session: perf_counter of its answer}}."""
    from benchmarks.burst import CpuSampler, burst, request

    url = urlsplit(host.endpoint.url)
    headers = {"Authorization": f"Bearer {host.endpoint.token}"}
    claims = [request("POST", "/v1/sessions", url.netloc, headers,
                      {"pool": pool, "session": session, "from_snapshot": None}) for pool, session in sessions]
    with CpuSampler(pid) as sampler:
        answers = burst((url.hostname, url.port), claims, warmup=request("GET", "/healthz", url.netloc, {}),
                        timeout=300)
    timings: dict[str, tuple[float, int]] = {}
    failures: list[str] = []
    sandbox_of: dict[str, str] = {}
    ends: dict[str, tuple[float, float]] = {}
    for (_, session), answer in zip(sessions, answers):
        if answer.status not in (200, 201):
            failures.append(f"{session}: {answer.status} {answer.body[:200]!r}")
            continue
        sandbox = answer.json()["sandbox"]
        timings[session] = (answer.ms, int(sandbox.rsplit("-", 1)[1]))
        sandbox_of[session] = sandbox
        ends[session] = (answer.at - answer.ms / 1000, answer.at)
    return timings, failures, sandbox_of, {"sampler": sampler, "ends": ends}


def _cpu_line(cpu: dict, timings: dict, warm: int) -> str:
    """Where the CPU went from the burst's first request to its last warm hit's answer."""
    spans = [cpu["ends"][s] for s, (_, replica) in timings.items() if replica < warm and s in cpu["ends"]]
    if not spans:
        return "no warm hit"
    used = cpu["sampler"].between(min(s[0] for s in spans), max(s[1] for s in spans))
    rest = used["machine"] - used["cgroup"] - used["own"] - used["daemon"]
    return (f"from the first claim to the last warm hit's answer ({used['wall'] * 1000:.0f} ms, sampled every 20 ms; "
            f"2 cores = {2 * used['wall'] * 1000:.0f} ms of CPU at most): the machine used "
            f"{used['machine'] * 1000:.0f} ms of CPU, the runtime's container {used['cgroup'] * 1000:.0f} ms, "
            f"dockerd and containerd (creating the on-demand sandboxes) {used['daemon'] * 1000:.0f} ms, this load "
            f"generator {used['own'] * 1000:.0f} ms, everything else (the containers' shims and runc, other users) "
            f"{rest * 1000:.0f} ms")


def _round(ctx: Context, name: str, host, docker_client, deployment, sessions, warm: int,
           spread_s: float | None) -> dict:
    """One round: wait for the warm sandboxes, claim, release; what happened."""
    from sandstack.client import NotFound

    # The runtime starts beside the stack's sandboxes and takes each into service once it runs (one its monitor saw
    # missing is reset first); a release resets its sandbox. The figures are claims on warm pools, so a round starts
    # when every warm sandbox is idle; how long that took, and what the runtime said of the others, is reported.
    ready_s, not_idle = _wait_idle(host, 2 * warm, timeout=600)
    ctx.log(f"concurrency {name}: every warm sandbox idle after {ready_s:.1f} s; at first look {len(not_idle)} were "
            "not" + (f" ({sorted(set(not_idle.values()))[:3]})" if not_idle else ""))
    runtime_pid = docker_client.containers.get(deployment.name("runtime")).attrs["State"]["Pid"]
    timings, failures, sandbox_of, cpu = _claims(host, sessions, spread_s, runtime_pid)
    if cpu is not None:
        ctx.log(f"concurrency {name}: CPU {_cpu_line(cpu, timings, warm)}")
    # The runtime's own time per claim (its audit line: arrival at the application to the answer's start): the
    # rest of a claim's time is the client's threads, HTTP and the wait before the runtime's event loop reads it.
    server = {line["session"]: line["ms"] for line in host.audit(limit=2000)
              if line["operation"] == "claim" and line["session"] in timings and line.get("ms") is not None}
    # A session that ended before its release (the sandbox's row says why) is reported, not fatal.
    ended = {row["sandbox"]: row.get("detail") for row in host.sandboxes() if row.get("detail")}
    lost: list[str] = []
    for _, session in sessions:
        try:  # a failed claim too: its answer may be what was lost (the runtime bound a sandbox to it)
            host.release(session)
        except NotFound:
            if session in timings:
                lost.append(session)
    if lost or failures:  # why, from the runtime's own log (a row's detail is gone once it is reset)
        runtime_log = docker_client.containers.get(deployment.name("runtime")).logs().decode(errors="replace")
        names = {*lost, *(sandbox_of[s] for s in lost)}
        ctx.log(f"concurrency {name}: ended before their release: {sorted((s, sandbox_of[s]) for s in lost)}")
        for line in [line for line in runtime_log.splitlines()
                     if "WARNING" in line or any(f"{n} " in line or f"{n}\"" in line or line.endswith(n)
                                                 for n in names)][:40]:
            ctx.log(f"concurrency {name}: runtime: {line}")
    warm_hits = [ms for ms, replica in timings.values() if replica < warm]
    server_hits = [server[s] for s, (_, replica) in timings.items() if replica < warm and s in server]
    # The slowest warm hits (the slowest claims of all are always on-demand creations, which say nothing of the tail).
    slowest = sorted((s for s in timings if timings[s][1] < warm), key=lambda s: timings[s][0])[-5:]
    ctx.log(f"concurrency {name}: the runtime's own time of warm hits p50 {_percentile(server_hits, 50):.1f} ms, "
            f"p99 {_percentile(server_hits, 99):.1f} ms; slowest warm hits (client/runtime ms): "
            + ", ".join(f"{timings[s][0]:.0f}/{server.get(s, float('nan')):.0f}" for s in slowest))
    ctx.log(f"concurrency {name}: {len(timings)} of {len(sessions)} claimed; warm p50 "
            f"{_percentile(warm_hits, 50):.0f} ms, p99 {_percentile(warm_hits, 99):.0f} ms; {len(failures)} failed"
            + (f" ({failures[0]})" if failures else "") + f"; {len(lost)} ended before their release"
            + (f" ({sorted(set(ended.values()))[:3]})" if ended else ""))
    return {"timings": timings, "warm_hits": warm_hits, "server_hits": server_hits,
            "created": [ms for ms, replica in timings.values() if replica >= warm]}


def _http(endpoint, timeout: float, headers: dict[str, str]):
    """The benchmark's httpx client: a connection for every claiming thread, all kept. With httpx's default pool (100
    connections, 20 kept) the sync pool of httpcore 1.0.9 can close a connection it has already handed to a waiting
    thread, when it trims the connections it keeps or makes room at its limit (encode/httpcore#1110): that thread then
    waits for an answer on a closed socket until its timeout. One warm hit of the burst round took 300,930 ms so
    (the 300 s timeout, then a retry answered in 28 ms) and held the round for five minutes; without a limit the pool
    never closes a connection to make room, so the race cannot happen. What is timed is unchanged: each claim from
    the thread's start to its answer."""
    import httpx

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    return httpx.Client(base_url=endpoint.url, headers=headers, timeout=timeout, limits=limits)


def run(ctx: Context) -> SectionResult:
    import docker

    from sandstack.client import Client
    from testbed.deploy import Deployment
    from testbed.harness.harness import Harness

    result = SectionResult("concurrency", TITLE)
    client = docker.from_env(timeout=300)
    imgs = engine.images(client)
    warm, ondemand = _sizes(ctx)
    rounds: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="sandstack-bench-concurrency-") as tmp:
        harness = Harness()
        deployment = Deployment(harness, Path(tmp), secret_config={"runtimeToken": TOKEN})
        try:
            deployment.up(_spec(imgs.debian, warm, ondemand))
            outputs = {"hosts": {"local": {"url": f"http://127.0.0.1:{PORT}", "token": TOKEN}},
                       "pools": {pool: ["local"] for pool in POOLS}}
            with Client.from_outputs(outputs, timeout=300, http_factory=_http) as api:
                host = api.host("local")
                host.pools()  # the connection made before any claim: not part of one
                for name, spread_s in (("burst", None), ("spread", SPREAD_S)):
                    sessions = [(POOLS[i % 2], f"bench-{name}-{i}") for i in range(2 * (warm + ondemand))]
                    rounds[name] = _round(ctx, name, host, client, deployment, sessions, warm, spread_s)
        finally:
            harness.teardown()
    total = 2 * (warm + ondemand)
    for name, what in (("burst", "claimed in the same instant"),
                       ("spread", f"arriving over {SPREAD_S:g} s")):
        figures = rounds[name]
        hits = figures["warm_hits"]
        p50, p99 = _percentile(hits, 50), _percentile(hits, 99)
        prefix = "concurrency" if name == "burst" else "concurrency.spread"
        result.figures += [
            Figure(f"{prefix}.sessions", f"{total} sessions {what}, held together, over 2 pools ({warm} warm + "
                   f"{ondemand} on demand each); claimed", "sessions",
                   Stat(len(figures["timings"]), len(figures["timings"]), total, 1)),
            Figure(f"{prefix}.warm_claim_p50_ms", f"{name}: claim of a warm sandbox, p50 ({len(hits)})", "ms",
                   Stat(p50, min(hits), max(hits), len(hits))),
            Figure(f"{prefix}.warm_claim_p99_ms", f"{name}: claim of a warm sandbox, p99", "ms",
                   Stat(p99, p99, p99, len(hits)), Goal("<=", 50)),
            Figure(f"{prefix}.warm_claim_runtime_p99_ms", f"{name}: the runtime's own time of those claims, p99 "
                   "(its audit line)", "ms", Stat(_percentile(figures["server_hits"], 99),
                                                  min(figures["server_hits"], default=0),
                                                  max(figures["server_hits"], default=0), len(figures["server_hits"]))),
            Figure(f"{prefix}.ondemand_claim_ms", f"{name}: claim creating one on demand, to ready", "ms",
                   stat(figures["created"])),
        ]
    return result
