"""Issue 39 item 4's figure (Docker): SSH session start, from starting this machine's `ssh` to the first byte of its
command's output, through the runtime's SSH endpoint into a session's sandbox (docs/design/ssh.md): a TCP connection,
key exchange, a public key login checked against the claim's keys, a session channel, and the command as a Docker
exec of the sandbox's user. Beside it, the same command with `docker exec` as the sandbox's user (what a platform
with the Docker socket would run instead, no SSH), alternating, pair by pair. Then a forwarded connection's setup
(`forwarding: local`): through one open `ssh -L`, a new connection and one HTTP request to a server in the sandbox,
by `localhost` (the relay exec'd in the sandbox: how VS Code reaches its server) and by the sandbox's address (a
direct connection from the runtime), alternating.
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
# Waits for the sandbox's server on port 8000, then prints the sandbox's address.
WAIT_AND_ADDRESS = ("import socket,time\nfor _ in range(100):\n    try:\n        socket.create_connection(('127.0.0.1', "
                    "8000), 1).close(); break\n    except OSError: time.sleep(0.1)\n"
                    "print(socket.gethostbyname(socket.gethostname()))")


def _spec(debian: str) -> str:
    from testbed.deploy import engine_spec  # Docker sections only: see engine.py

    template = {"base_image": debian, "command": engine.SLEEPER, "limits": {"memory": "128MiB"},
                "workdir": "/workspace", "filesystem": {"writable": [{"path": "/workspace", "size": "16MiB"}]},
                "session": {"idle": "never"}}
    data = yaml.safe_load(engine_spec(debian, {"agent": template},
                                      {"agent": {"template": "agent", "hosts": ["local"], "replicas": 1}}))
    data["hosts"]["local"]["runtime"] = {"port": PORT, "token": {"secret": "runtimeToken"},
                                         "ssh": {"port": SSH_PORT, "host_key": {"secret": "sshHostKey"},
                                                 "forwarding": "local"}}
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


def request_ms(port: int) -> float:
    """Milliseconds for a new connection to this machine's `port` and one HTTP request's whole answer."""
    import socket

    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        conn.sendall(b"GET /ready.txt HTTP/1.0\r\n\r\n")
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    if not answer.endswith(b"ready\n"):
        raise RuntimeError(f"the forward answered {answer[:200]!r}")
    return (time.perf_counter() - started) * 1000


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
    via_ssh, via_exec, via_relay, via_address = [], [], [], []
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
            box.write_file("ready.txt", b"ready\n")
            box.start(["python3", "-m", "http.server", "8000", "--bind", "0.0.0.0"])
            address = box.exec(["python3", "-c", WAIT_AND_ADDRESS]).stdout.strip()
            with ssh_clients.local_forward(SSH_PORT, "bench-ssh", "localhost:8000", key=key) as relayed, \
                    ssh_clients.local_forward(SSH_PORT, "bench-ssh", f"{address}:8000", key=key) as direct:
                request_ms(relayed)  # one of each before timing
                request_ms(direct)
                for _ in range(count):
                    via_relay.append(request_ms(relayed))
                    via_address.append(request_ms(direct))
            box.release()
            api.close()
        finally:
            harness.teardown()
    ctx.log(f"ssh: start p50 {statistics.median(via_ssh):.0f} ms, docker exec {statistics.median(via_exec):.0f} ms; "
            f"forwarded request p50 {statistics.median(via_relay):.0f} ms by localhost (relayed), "
            f"{statistics.median(via_address):.0f} ms by the sandbox's address")
    result.figures += [
        Figure("ssh.start_ms", f"`ssh host cmd`: process start to the command's first output byte ({len(via_ssh)} "
               "logins by key)", "ms", stat(via_ssh)),
        Figure("ssh.docker_exec_ms", "`docker exec` of the same command as the sandbox's user", "ms", stat(via_exec)),
        Figure("ssh.start_ratio", "ssh / docker exec, pair by pair", "×",
               stat([a / b for a, b in zip(via_ssh, via_exec)])),
        Figure("ssh.forward_relayed_ms", "through `ssh -L` to localhost:8000 (the relay exec'd in the sandbox): a new "
               "connection and one HTTP request", "ms", stat(via_relay)),
        Figure("ssh.forward_direct_ms", "the same to the sandbox's address:8000 (a direct connection)", "ms",
               stat(via_address)),
    ]
    return result
