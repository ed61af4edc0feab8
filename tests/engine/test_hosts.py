"""One stack on three real Docker hosts — a unix socket, ssh:// and tcp:// with TLS (testbed/hosts.py) — applied
through one provider per host (testbed/harness/hosts_backend.py), then one host lost and back.

Proven on each host kind (the properties that can differ per host; the rest of the single-host engine suite is
host-independent and stays there): the guard, gateway and runtime up; the egress modes (allow-all reaches this
machine's side of the host's link, deny-all does not); isolation between pools; the host closed to sandboxes (its
runtime port, from a sandbox); the memory limit. Then the faults: a host's daemon stopped → claims fail over to the
pool's other hosts in bounded time, its sessions are reported lost, a re-apply names the unreachable host and
changes nothing elsewhere; the host back is reconciled. Wrong TLS material or ssh key: an error naming the host,
no secret in it.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import docker
import pytest
import yaml

from sandstack.client import Client
from sandstack.client.client import HostUnavailable
from sandstack.program import program as sandstack_program
from testbed import images
from testbed.harness.harness import Harness
from testbed.harness.hosts_backend import HostsBackend, HostUnreachable
from testbed.hosts import TestHosts, _tls_material, leftovers
from testbed.specs import spec, spec_text
from testbed.waiting import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PORT = 17490
ECHO_PORT = 18090
TOKEN = "engine-test-hosts-token-0123456789"
STACK = "hosts"
KINDS = ["local", "ssh", "tcp"]
KIND_OF = {"local": "unix", "ssh": "ssh", "tcp": "tcp"}
SANDBOX = {"command": ["sleep", "infinity"], "limits": {"cpus": 0.25, "memory": "128MiB", "pids": 64},
           "session": {"idle": "never"}}


class Echo:
    """A TCP server on this machine's end of each host's link: what a sandbox reaches when its egress lets it out.
    Records who connected, so a refusal is also seen from the server's side."""

    def __init__(self, addresses: list[str]):
        self.peers: list[str] = []
        self.sockets = []
        for address in addresses:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((address, ECHO_PORT))
            s.listen(16)
            s.settimeout(0.5)
            self.sockets.append(s)
        self.stopped = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped:
            for s in self.sockets:
                try:
                    conn, peer = s.accept()
                except OSError:
                    continue
                self.peers.append(peer[0])
                conn.sendall(b"echo\n")
                conn.close()

    def close(self) -> None:
        self.stopped = True
        self.thread.join(timeout=5)
        for s in self.sockets:
            s.close()


def _source_images() -> tuple[docker.DockerClient | None, list[str]]:
    """The test images from this machine's daemon (built by `python -m testbed.images`), or None to build them
    on the first test host when that daemon does not answer."""
    try:
        client = docker.from_env(timeout=300)
        client.ping()
        return client, [images.debian_image(client)]
    except docker.errors.DockerException:
        return None, []


def _spec(hosts: TestHosts, image: str) -> str:
    entries = {}
    for i, name in enumerate(KINDS):
        entries[name] = {**hosts[name].spec_host(), "infra_image": image, "dns_upstream": ["127.0.0.1"],
                         "capacity": {"cpus": 2, "memory": "4GiB", "disk": "8GiB"}, "overcommit": {"cpus": 8},
                         "subnet_pool": f"10.{230 + i}.0.0/16",
                         "runtime": {"port": PORT, "exposure": "public", "token": {"secret": "runtimeToken"}}}
    templates = {"open": {**SANDBOX, "base_image": image, "network": {"egress": "allow-all", "log": False}},
                 "closed": {**SANDBOX, "base_image": image, "network": {"egress": "deny-all"}}}
    pools = {"open": {"template": "open", "hosts": KINDS, "replicas": 2},
             "closed": {"template": "closed", "hosts": KINDS, "replicas": 1}}
    return spec_text(spec(templates, pools, hosts=entries))


class Fleet:
    def __init__(self, hosts: TestHosts, harness: Harness, workdir: Path, secrets: dict):
        self.hosts, self.harness, self.workdir, self.secrets = hosts, harness, workdir, secrets

    def up(self, **kwargs):
        path, build = self.workdir / "stack.yaml", self.workdir / "build"
        return self.harness.run(lambda: sandstack_program(path, stack=STACK, build_root=build),
                                secret_config={f"sandstack:{k}": v for k, v in self.secrets.items()}, **kwargs)

    def client(self) -> Client:
        outputs = self.harness.last.outputs["runtime"]
        # The unix-socket host is this machine's in production (runtime at localhost); the test's is in its own
        # network namespace, reached at its link address (as the other test already reaches 127.0.0.1).
        local = outputs["hosts"]["local"]
        assert local["url"] == f"http://localhost:{PORT}"
        hosts = {**outputs["hosts"], "local": {**local, "url": f"http://{self.hosts['local'].address}:{PORT}"}}
        return Client.from_outputs({"hosts": hosts, "pools": outputs["pools"]}, timeout=30, actor="engine-test")

    def container(self, host: str, name: str):
        return self.hosts[host].client().containers.get(name)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    source, tags = _source_images()
    with TestHosts([KIND_OF[k] for k in KINDS]) as started:
        started.hosts = {name: started.hosts[KIND_OF[name]] for name in KINDS}
        if source is None:
            source = started["local"].client(timeout=600)
            tags = [images.debian_image(source)]
        started.load_images(tags, source)
        workdir = tmp_path_factory.mktemp("hosts")
        (workdir / "stack.yaml").write_text(_spec(started, tags[0]))
        secrets = {"runtimeToken": TOKEN, **started.secrets}
        harness = Harness(HostsBackend(f"hosts-{time.monotonic_ns()}"), stack=STACK)
        echo = Echo([h.peer_address for h in started.hosts.values()])
        try:
            fleet = Fleet(started, harness, workdir, secrets)
            started_at = time.monotonic()
            fleet.first = fleet.up()
            fleet.deploy_seconds = time.monotonic() - started_at
            fleet.echo = echo
            yield fleet
        finally:
            echo.close()
            try:
                harness.teardown()
                left = harness.backend.remaining(harness.session_id)
                assert not left, f"the stack left objects on the hosts: {left}"
            finally:
                harness.backend.close()
    assert leftovers() == []


def _probe(container, address: str, port: int) -> bool:
    """Whether a TCP connection from inside the sandbox (as its user) to address:port succeeds."""
    code = (f"import socket\ntry:\n socket.create_connection(({address!r}, {port}), timeout=2).close(); print('open')\n"
            "except OSError as e:\n print('shut', e)")
    result = container.exec_run(["python3", "-c", code])
    return result.output.decode().startswith("open")


def _ip(container, network_suffix: str) -> str:
    networks = container.attrs["NetworkSettings"]["Networks"]
    return next(n["IPAddress"] for name, n in networks.items() if name.endswith(network_suffix))


@pytest.mark.parametrize("host", KINDS)
def test_each_host_kind_runs_the_stack_and_enforces_it(fleet, host):
    opened = fleet.container(host, f"sandstack-{STACK}-open-0")
    closed = fleet.container(host, f"sandstack-{STACK}-closed-0")
    roles = {c.name for c in fleet.hosts[host].client().containers.list() if "_" in c.name}
    assert {f"sandstack-{STACK}_{r}" for r in ("guard", "runtime")} <= roles, roles
    peer, me = fleet.hosts[host].peer_address, fleet.hosts[host].address
    # Egress modes: allow-all leaves the host (to this machine's end of the link), deny-all does not.
    assert _probe(opened, peer, ECHO_PORT)
    assert not _probe(closed, peer, ECHO_PORT)
    # Isolation between pools (a server in the other pool's sandbox, which answers on its own network), and the
    # host closed to its sandboxes (its own address, where its runtime listens).
    closed.exec_run(["python3", "-m", "http.server", str(ECHO_PORT)], detach=True)
    target = _ip(closed, "closed")
    assert wait_until(lambda: _probe(closed, target, ECHO_PORT), timeout=10, what="the server in the closed pool")
    assert not _probe(opened, target, ECHO_PORT)
    assert not _probe(opened, me, PORT)
    # Limits, from inside (the kernel's cgroup of the sandbox).
    limit = opened.exec_run(["cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]).output.decode().strip()
    assert limit == str(128 * 2**20)


def test_every_host_answers_claims_through_its_runtime(fleet):
    client = fleet.client()
    try:
        seen = {}
        for i in range(12):
            sandbox = client.claim("open", f"spread-{i}")
            seen.setdefault(sandbox.host.name, sandbox)
            if len(seen) == 3:
                break
        assert sorted(seen) == sorted(KINDS)
        for name, sandbox in seen.items():
            assert sandbox.exec(["sh", "-c", "echo hi"])["stdout"] == "hi\n"
    finally:
        for name in KINDS:
            for sandbox in client.host(name).sandboxes():
                if sandbox.get("session"):
                    client.host(name).release(sandbox["session"])
        client.close()


def test_wrong_credentials_name_the_host_and_no_secret(fleet, tmp_path):
    backend = HostsBackend("wrong-credentials")
    try:
        ssh, tcp = fleet.hosts["ssh"], fleet.hosts["tcp"]
        backend.providers["ssh"] = {"host": ssh.endpoint, "sshOpts": ssh.ssh_opts(ssh.dir / "wrong_key")}
        with pytest.raises(HostUnreachable) as failure:
            backend.provider_host("urn:ssh", "ssh")
        assert str(failure.value) == f"host {ssh.endpoint}: ssh failed (root@{ssh.address}: Permission denied (publickey).)"
        wrong = _tls_material(tmp_path, "other", tcp.address)  # a CA and client the daemon never trusted
        backend.providers["tcp"] = {"host": tcp.endpoint, "caMaterial": wrong["otherTls.ca"],
                                    "certMaterial": wrong["otherTls.cert"], "keyMaterial": wrong["otherTls.key"]}
        with pytest.raises(HostUnreachable) as failure:
            backend.provider_host("urn:tcp", "tcp")
        message = str(failure.value)
        assert message.startswith(f"host {tcp.endpoint}: the Docker daemon does not answer (")
        assert "CERTIFICATE_VERIFY_FAILED" in message
        for pem in wrong.values():
            assert not any(line in message for line in pem.splitlines() if len(line) > 8)
    finally:
        backend.close()


def test_a_host_lost_then_back(fleet):
    client = fleet.client()
    tcp = fleet.hosts["tcp"]
    try:
        # A session the pool's rotation sends to the tcp host first, bound there before the loss.
        session = next(f"lost-{i}" for i in range(100) if client.hosts_for("open", f"lost-{i}")[0] == "tcp")
        held = client.claim("open", session)
        assert held.host.name == "tcp"
        healthy = _claim_seconds(client, "healthy", 5)
        tcp.stop_daemon()
        # The session on the lost host is reported lost, naming its host.
        with pytest.raises(HostUnavailable) as lost:
            client.sandbox(f"tcp/{held.name}")
        assert lost.value.host == "tcp"
        # Claims that would go to the tcp host first fail over to the pool's other hosts, in bounded time.
        started = time.monotonic()
        moved = client.claim("open", f"{session}-again")
        detect = time.monotonic() - started
        assert moved.host.name in ("local", "ssh") and detect < 5
        failover = _claim_seconds(client, "failover", 5, prefer="tcp")
        print(f"\n[hosts] deploy 3 hosts {fleet.deploy_seconds:.1f}s; claim p50 healthy {healthy*1000:.0f}ms, "
              f"through failover {failover*1000:.0f}ms; lost host detected in {detect*1000:.0f}ms")
        assert failover <= max(2 * healthy, 0.05)
        # A re-apply names the unreachable host and changes nothing on the others.
        again = fleet.up(check=False)
        assert isinstance(again.error, HostUnreachable)
        assert str(again.error).startswith(f"host {tcp.endpoint}: the Docker daemon does not answer")
        assert {a.kind for a in again.actions} <= {"same"}, str(again)
        # Back: the daemon restarts its containers; a re-apply reconciles what is missing and the runtime answers.
        tcp.start_daemon()
        back = fleet.up()
        assert back.count("create") == back.count("delete") == 0, str(back)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                client.host("tcp").pools()
                break
            except HostUnavailable:
                time.sleep(0.5)
        assert client.host("tcp").pools()
    finally:
        for name in KINDS:
            try:
                for sandbox in client.host(name).sandboxes():
                    if sandbox.get("session"):
                        client.host(name).release(sandbox["session"])
            except HostUnavailable:
                pass
        client.close()


def _claim_seconds(client: Client, prefix: str, count: int, prefer: str | None = None) -> float:
    """Median time of `count` claims-and-releases on pool `open` (sessions the rotation sends to `prefer` first)."""
    names = [f"{prefix}-{i}" for i in range(1000)]
    sessions = [s for s in names if prefer is None or client.hosts_for("open", s)[0] == prefer][:count]
    times = []
    for session in sessions:
        started = time.monotonic()
        sandbox = client.claim("open", session)
        times.append(time.monotonic() - started)
        sandbox.release()
    return sorted(times)[len(times) // 2]
