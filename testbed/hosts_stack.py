"""A stack on the test hosts (testbed/hosts.py), applied through one provider per host, as the engine test
(tests/engine/test_hosts.py) and the `hosts` benchmark use it.

    with fleet_deployed(["local", "ssh", "tcp"], workdir) as fleet:   # hosts up, images loaded, stack applied
        fleet.client().claim("open", "chat-1")
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path
from typing import Iterator

import docker

from sandstack.client import Client
from sandstack.program import program as sandstack_program
from testbed import images
from testbed.harness.harness import Harness
from testbed.harness.hosts_backend import HostsBackend
from testbed.hosts import TestHosts, leftovers
from testbed.specs import spec, spec_text

PORT = 17490
ECHO_PORT = 18090
TOKEN = "engine-test-hosts-token-0123456789"
STACK = "hosts"
KIND_OF = {"local": "unix", "ssh": "ssh", "tcp": "tcp"}  # the spec's host name → how the stack reaches it
SANDBOX = {"command": ["sleep", "infinity"], "limits": {"cpus": 0.25, "memory": "128MiB", "pids": 64},
           "session": {"idle": "never"}}
# The per-host proofs (stack_spec(proofs=True)): every host's ingress serves the `web` pool's URL; the guard ends
# `expire-<host>` at its max lifetime and `idle-<host>` at its idle timeout.
INGRESS_PORT = 18443
DOMAIN = "sbx.test"
LIFETIME, IDLE = 5, 4
SERVE = "mkdir -p /tmp/www && hostname > /tmp/www/who && exec python3 -m http.server 8080 --directory /tmp/www"


class Echo:
    """An HTTP server on this machine's end of each host's link: what a sandbox reaches when its egress lets it
    out (the link is the host's only way anywhere). Records who connected, so a refusal is seen from here too."""

    def __init__(self, addresses: list[str]):
        self.peers: list[str] = []
        self.sockets = []
        for address in addresses:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((address, ECHO_PORT))
            s.listen(16)
            s.settimeout(0.2)
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
                conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\necho\n")
                conn.close()

    def close(self) -> None:
        self.stopped = True
        self.thread.join(timeout=5)
        for s in self.sockets:
            s.close()


def stack_spec(hosts: dict, image: str, pools_on: list[str], proofs: bool = False,
               deny: tuple[str, ...] = ()) -> str:
    """Pools `open` (allow-all, direct, 2 per host), `logged` (allow-all through the gateway) and `closed`
    (deny-all) on each of `pools_on`; every host has a public runtime. With `proofs`, also a public ingress per
    host and the pools of the per-host proofs (above). `deny`: the `logged` pool's deny entries (a change that
    reloads every host's gateway and logging resolver in place). The lifetime pools are one per host: the test hosts share
    this machine's cgroup tree, where a pool's sandboxes on several hosts would share one cgroup parent, and every
    host's guard would see (and end) the others' (docs/design/hosts.md, limits of the test hosts)."""
    entries = {}
    for i, (name, host) in enumerate(hosts.items()):
        entries[name] = {**host.spec_host(), "infra_image": image, "dns_upstream": ["127.0.0.1"],
                         # disk: six pools' snapshot_storage (8GiB each by default: rule snapshot-storage)
                         "capacity": {"cpus": 2, "memory": "4GiB", "disk": "64GiB"}, "overcommit": {"cpus": 8},
                         "subnet_pool": f"10.{230 + i}.0.0/16",
                         "runtime": {"port": PORT, "exposure": "public", "token": {"secret": "runtimeToken"}}}
    templates = {"open": {**SANDBOX, "base_image": image, "network": {"egress": "allow-all", "log": False}},
                 "logged": {**SANDBOX, "base_image": image,
                            "network": {"egress": "allow-all", **({"deny": list(deny)} if deny else {})}},
                 "closed": {**SANDBOX, "base_image": image, "network": {"egress": "deny-all"}}}
    pools = {"open": {"template": "open", "hosts": pools_on, "replicas": 2},
             "logged": {"template": "logged", "hosts": pools_on, "replicas": 1},
             "closed": {"template": "closed", "hosts": pools_on, "replicas": 1}}
    if proofs:
        for entry in entries.values():
            entry["ingress"] = {"domain": DOMAIN, "port": INGRESS_PORT, "exposure": "public"}
        sleeper = {**SANDBOX, "base_image": image, "network": {"egress": "deny-all"}}
        templates.update({
            "web": {**sleeper, "command": ["sh", "-c", SERVE], "ports": [{"port": 8080, "exposure": "url"}]},
            "expire": {**sleeper, "lifecycle": {"max_lifetime": f"{LIFETIME}s", "on_expiry": "stop"}},
            "idle": {**sleeper, "lifecycle": {"idle_timeout": f"{IDLE}s"}}})
        pools["web"] = {"template": "web", "hosts": pools_on, "replicas": 1}
        for host in pools_on:
            pools[f"expire-{host}"] = {"template": "expire", "hosts": [host], "replicas": 1}
            pools[f"idle-{host}"] = {"template": "idle", "hosts": [host], "replicas": 1}
    return spec_text(spec(templates, pools, hosts=entries))


class Fleet:
    def __init__(self, hosts: dict, harness: Harness, workdir: Path, secrets: dict):
        self.hosts, self.harness, self.workdir, self.secrets = hosts, harness, workdir, secrets
        self.deploy_seconds = 0.0
        self.echo: Echo | None = None
        self.image = ""

    def rewrite(self, **spec_args) -> None:
        """The stack file again, with `stack_spec`'s other arguments (the next `up` applies it)."""
        (self.workdir / "stack.yaml").write_text(stack_spec(self.hosts, self.image, list(self.hosts), **spec_args))

    def up(self, **kwargs):
        path, build = self.workdir / "stack.yaml", self.workdir / "build"
        return self.harness.run(lambda: sandstack_program(path, stack=STACK, build_root=build),
                                secret_config={f"sandstack:{k}": v for k, v in self.secrets.items()}, **kwargs)

    def client(self) -> Client:
        outputs = self.harness.last.outputs["runtime"]
        hosts = dict(outputs["hosts"])
        if "local" in hosts:
            # The unix-socket host is this machine in production (its runtime at localhost); the test's is in its
            # own network namespace, reached at its link address (as single-host tests reach 127.0.0.1).
            assert hosts["local"]["url"] == f"http://localhost:{PORT}", hosts["local"]
            hosts["local"] = {**hosts["local"], "url": f"http://{self.hosts['local'].address}:{PORT}"}
        return Client.from_outputs({"hosts": hosts, "pools": outputs["pools"]}, timeout=30, actor="engine-test")

    def container(self, host: str, name: str):
        return self.hosts[host].client().containers.get(name)


def _source_images() -> tuple[docker.DockerClient | None, list[str]]:
    """The Debian test image from this machine's daemon (`python -m testbed.images` built it), or None when no
    daemon answers (then it is built on the first test host)."""
    try:
        client = docker.from_env(timeout=300)
        client.ping()
        return client, [images.debian_image(client)]
    except docker.errors.DockerException:
        return None, []


@contextlib.contextmanager
def fleet_deployed(names: list[str], workdir: Path, *, first_index: int = 1, proofs: bool = False) -> Iterator[Fleet]:
    """Test hosts named `names` (each one of KIND_OF), the stack applied to them with every pool on all of them;
    everything torn down and checked gone at the end. `deploy_seconds` is the first apply alone: starting the
    hosts and loading the images into them is test setup, not deploy."""
    source, tags = _source_images()
    with TestHosts([KIND_OF[n] for n in names], first_index=first_index) as started:
        hosts = {name: started[KIND_OF[name]] for name in names}
        if source is None:
            source = hosts[names[0]].client(timeout=600)
            tags = [images.debian_image(source)]
        started.load_images(tags, source)
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "stack.yaml").write_text(stack_spec(hosts, tags[0], names, proofs))
        harness = Harness(HostsBackend(f"hosts-{time.monotonic_ns()}"), stack=STACK)
        echo = Echo([h.peer_address for h in hosts.values()])
        try:
            fleet = Fleet(hosts, harness, workdir, {"runtimeToken": TOKEN, **started.secrets})
            fleet.echo, fleet.image = echo, tags[0]
            started_at = time.monotonic()
            fleet.up()
            fleet.deploy_seconds = time.monotonic() - started_at
            yield fleet
        finally:
            echo.close()
            try:
                harness.teardown()
                left = harness.backend.remaining(harness.session_id)
                assert not left, f"the stack left objects on the hosts: {left}"
            finally:
                harness.backend.close()
    left = leftovers(list(hosts.values()))
    assert not left, f"the test hosts left {left} on this machine"


def claim_seconds(client: Client, pool: str, prefix: str, count: int, prefer: str | None = None) -> float:
    """Median seconds of `count` claims on `pool` (each released untimed); with `prefer`, sessions whose rotation
    tries that host first."""
    names = [f"{prefix}-{i}" for i in range(1000)]
    sessions = [s for s in names if prefer is None or client.hosts_for(pool, s)[0] == prefer][:count]
    times = []
    for session in sessions:
        started = time.monotonic()
        sandbox = client.claim(pool, session)
        times.append(time.monotonic() - started)
        sandbox.release()
    return sorted(times)[len(times) // 2]
