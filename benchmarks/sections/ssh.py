"""Issue 39 item 4's figure (Docker): SSH session start, from starting this machine's `ssh` to the first byte of its
command's output, through the runtime's SSH endpoint into a session's sandbox (docs/design/ssh.md): a TCP connection,
key exchange, a public key login checked against the claim's keys, a session channel, and the command as a Docker
exec of the sandbox's user. Beside it, the same command with `docker exec` as the sandbox's user (what a platform
with the Docker socket would run instead, no SSH), alternating, pair by pair.
"""

from __future__ import annotations

import select
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.context import Context
from benchmarks.measure import stat
from benchmarks.results import Figure, SectionResult
from benchmarks.sections import engine

TITLE = "SSH into a session's sandbox: login to first command output (Docker)"
PORT, SSH_PORT = 17562, 17563
TOKEN = "benchmark-runtime-token-ssh-0123"


def _spec(debian: str) -> str:
    from testbed.deploy import engine_spec  # Docker sections only: see engine.py

    template = {"base_image": debian, "command": engine.SLEEPER, "limits": {"memory": "128MiB"},
                "workdir": "/workspace", "filesystem": {"writable": [{"path": "/workspace", "size": "16MiB"}]},
                "session": {"idle": "never"}}
    data = yaml.safe_load(engine_spec(debian, {"agent": template},
                                      {"agent": {"template": "agent", "hosts": ["local"], "replicas": 1}}))
    data["hosts"]["local"]["runtime"] = {"port": PORT, "token": {"secret": "runtimeToken"},
                                         "ssh": {"port": SSH_PORT, "host_key": {"secret": "sshHostKey"}}}
    return yaml.safe_dump(data, sort_keys=False)


def first_output_ms(argv: list[str]) -> float:
    """Milliseconds from starting `argv` to the first byte on its stdout (it must exit 0)."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    first = time.perf_counter() if ready and proc.stdout.read(1) else None
    _, err = proc.communicate(timeout=60)
    if proc.returncode != 0 or first is None:
        raise RuntimeError(f"{argv[0]} exited {proc.returncode} with no output: {err.decode(errors='replace')[-300:]}")
    return (first - started) * 1000


def _answers(port: int) -> bool:
    import httpx

    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def run(ctx: Context) -> SectionResult:
    import docker

    from sandstack.client import Client
    from testbed import ssh_clients
    from testbed.deploy import Deployment
    from testbed.harness.harness import Harness
    from testbed.waiting import wait_until

    result = SectionResult("ssh", TITLE)
    client = docker.from_env(timeout=120)
    imgs = engine.images(client)
    via_ssh, via_exec = [], []
    count = ctx.rounds(30, 8)
    with tempfile.TemporaryDirectory(prefix="sandstack-bench-ssh-") as tmp:
        folder = Path(tmp)
        host_key, _ = ssh_clients.keypair(folder, "host")
        key, line = ssh_clients.keypair(folder, "user")
        harness = Harness()
        deployment = Deployment(harness, folder / "deploy", secret_config={"runtimeToken": TOKEN,
                                                                           "sshHostKey": host_key.read_text()})
        try:
            deployment.up(_spec(imgs.debian))
            # The runtime serves once its reload container delivered its configuration (not waited for at create).
            wait_until(lambda: _answers(PORT), 120, what=f"the runtime on port {PORT}")
            api = Client.from_outputs({"hosts": {"local": {"url": f"http://127.0.0.1:{PORT}", "token": TOKEN}},
                                       "pools": {"agent": ["local"]}})
            box = api.claim("agent", "bench-ssh", ssh_keys=[line])
            ssh_argv = ["ssh", *ssh_clients.options(SSH_PORT, key), "bench-ssh@127.0.0.1", "echo ready"]
            exec_argv = ["docker", "exec", "-u", "10001:10001", "-w", "/workspace", box.name, "echo", "ready"]
            first_output_ms(ssh_argv)  # one of each before timing: the first login pays the runtime's imports
            first_output_ms(exec_argv)
            for _ in range(count):
                via_ssh.append(first_output_ms(ssh_argv))
                via_exec.append(first_output_ms(exec_argv))
            box.release()
            api.close()
        finally:
            harness.teardown()
    ctx.log(f"ssh: start p50 {statistics.median(via_ssh):.0f} ms, docker exec {statistics.median(via_exec):.0f} ms")
    result.figures += [
        Figure("ssh.start_ms", f"`ssh host cmd`: process start to the command's first output byte ({len(via_ssh)} "
               "logins by key)", "ms", stat(via_ssh)),
        Figure("ssh.docker_exec_ms", "`docker exec` of the same command as the sandbox's user", "ms", stat(via_exec)),
        Figure("ssh.start_ratio", "ssh / docker exec, pair by pair", "×",
               stat([a / b for a, b in zip(via_ssh, via_exec)])),
    ]
    return result
