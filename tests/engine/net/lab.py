"""Objects the network tests create themselves, and reading what their servers saw.

Every destination these tests try is on this machine: the host's own addresses, the stack's containers,
and objects the tests create themselves (the `Lab`): plain Docker networks with server containers standing
in for "the internet" or "a metadata service" (network aliases, chosen addresses), and a network namespace
behind a veth pair (`Netns`) for the one "internet" a routed sandbox can reach through the host's
forwarding path (Docker isolates its bridges from each other, docs/design/engine-findings.md a).
That internet's addresses are in 198.18.0.0/15, the benchmarking range (the namespaces 198.18.0.0/16, the
deployments' networks, egress network included, 198.19.0.0/16): not private, since the gateway and the guard
refuse private destinations (docs/design/egress.md), and routed nowhere from this machine, so nothing leaves it.
A test that wants a private destination picks one with `netns(..., address=)`.

- `Lab`: creates those objects and removes all of them on `close()`; every Docker object carries
  `LAB_LABEL` and `LAB_PID_LABEL`, so `sweep_dead_labs` removes what a killed run left behind.
- `HostListener`: a TCP and a UDP listener on the host bound to 0.0.0.0, recording who connected.
- `log_lines` / `mark` / `peers_in`: who a `SERVER` container saw, and since when.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import socket
import subprocess
import threading
from pathlib import Path
from typing import Callable

import docker.errors

from testbed.harness.teardown import pid_alive
from testbed.leak_guard import sweep_dead_leak_guards
from tests.engine.net.probes import SERVER, host_tcp, tcp, udp
from testbed.waiting import wait_until

LAB_LABEL = "sandstack.nettest"  # value: "<pid>-<token>"; every Docker object a Lab creates carries it
LAB_PID_LABEL = "sandstack.nettest.pid"


class HostListener:
    """A TCP and a UDP listener on the host, on 0.0.0.0 (every address), recording each peer's address."""

    def __init__(self):
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind(("0.0.0.0", 0))
        self.tcp.listen(64)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("0.0.0.0", 0))
        self.tcp_port, self.udp_port = self.tcp.getsockname()[1], self.udp.getsockname()[1]
        self.peers: list[tuple[str, str]] = []  # (proto, address)
        self._closed = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True),
                         threading.Thread(target=self._receive, daemon=True)]
        for t in self._threads:
            t.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, peer = self.tcp.accept()
            except OSError:
                return
            self.peers.append(("tcp", peer[0]))
            with contextlib.suppress(OSError):
                conn.sendall(b"host\n")
            conn.close()

    def _receive(self) -> None:
        while not self._closed.is_set():
            try:
                _, peer = self.udp.recvfrom(4096)
            except OSError:
                return
            if peer is None:  # shut down
                return
            self.peers.append(("udp", peer[0]))
            with contextlib.suppress(OSError):
                self.udp.sendto(b"host\n", peer)

    def probes(self, addresses: list[str]) -> dict[str, dict]:
        return {**{f"tcp {a}": tcp(a, self.tcp_port) for a in addresses},
                **{f"udp {a}": udp(a, self.udp_port) for a in addresses}}

    def close(self) -> None:
        self._closed.set()
        for s in (self.tcp, self.udp):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def sweep_dead_labs(client) -> None:
    """Removes what Labs of test processes that no longer exist left behind (a killed run)."""
    def dead(obj_labels: dict) -> bool:
        pid = (obj_labels or {}).get(LAB_PID_LABEL, "")
        return pid.isdigit() and not pid_alive(pid)

    for c in client.containers.list(all=True, filters={"label": LAB_PID_LABEL}):
        if dead(c.labels):
            c.remove(force=True)
    for n in client.networks.list(filters={"label": LAB_PID_LABEL}):
        if dead(n.attrs.get("Labels")):
            with contextlib.suppress(docker.errors.APIError):
                n.remove()
    for ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n"):
        parts = ns.split()[0].split("-") if ns.strip() else []
        if len(parts) == 3 and parts[0] == "sntest" and parts[1].isdigit() and not pid_alive(parts[1]):
            subprocess.run(["ip", "netns", "del", ns.split()[0]], capture_output=True)
    sweep_dead_leak_guards()


class Lab:
    """Networks, containers, a network namespace and host listeners that a test module creates; `close()`
    removes all of them (in reverse order), whatever failed before."""

    def __init__(self, client, image: str):
        self.client, self.image = client, image
        self.token = f"{os.getpid()}-{secrets.token_hex(3)}"
        self.labels = {LAB_LABEL: self.token, LAB_PID_LABEL: str(os.getpid())}
        self._undo: list[tuple[str, Callable[[], None]]] = []

    def _on_close(self, what: str, undo: Callable[[], None]) -> None:
        self._undo.append((what, undo))

    def network(self, name: str, subnet: str | None = None, gateway: str | None = None):
        ipam = None
        if subnet:
            ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=subnet, gateway=gateway)])
        net = self.client.networks.create(f"sntest-{self.token}-{name}", driver="bridge", ipam=ipam,
                                          labels=self.labels)
        self._on_close(f"network {net.name}", net.remove)
        return net

    def server(self, name: str, network, specs: list[str], aliases: list[str] | None = None,
               ip: str | None = None):
        """A server container (SERVER) on `network` (a Lab network or a sandstack network's name)."""
        net_name = network if isinstance(network, str) else network.name
        container = self.client.containers.create(
            self.image, ["python3", "-c", SERVER, name, *specs], name=f"sntest-{self.token}-{name}",
            labels=self.labels, network=net_name, detach=True)
        self._on_close(f"container {container.name}", lambda: container.remove(force=True))
        if aliases or ip:
            # Reconnect with the aliases/address (create() only names the network).
            self.client.networks.get(net_name).disconnect(container)
            self.client.networks.get(net_name).connect(container, aliases=aliases, ipv4_address=ip)
        container.start()
        wait_until(lambda: "ready" in container.logs().decode(), 15, what=f"{container.name} to listen")
        return container

    def attach(self, container, network: str, aliases: list[str] | None = None) -> None:
        """Connects a Lab container to a sandstack network; disconnected on close (before the stack goes)."""
        net = self.client.networks.get(network)
        net.connect(container, aliases=aliases)
        self._on_close(f"{container.name} on {network}", lambda: _disconnect(net, container))

    def client_container(self, network):
        """An idle container on `network` to probe from (the "someone else on that network" control)."""
        container = self.client.containers.run(
            self.image, ["sleep", "infinity"], name=f"sntest-{self.token}-client-{secrets.token_hex(2)}",
            labels=self.labels, network=network.name, detach=True)
        self._on_close(f"container {container.name}", lambda: container.remove(force=True))
        return container

    def netns(self, name: str, index: int, specs: list[str], address: str | None = None) -> "Netns":
        """A network namespace reached from the host through a veth pair: a /30 of 198.18.0.0/16, its first
        address on the host side, the second inside (198.18.0.0/15 is reserved for benchmarking, and not private:
        the guard lets a direct route reach it as it would the internet), running SERVER. With `address`
        (e.g. the metadata address 169.254.169.254) the namespace takes that address and the host side the
        one below it, in a /30: a connected route more specific than any other on the host, checked before
        the namespace is handed out, so nothing a test sends there can leave this machine."""
        ns = Netns(f"sntest-{os.getpid()}-{name}", f"snt{os.getpid() % 100000}{index}", index, specs, address)
        self._on_close(f"netns {ns.name}", ns.close)
        ns.open()
        return ns

    def host_listener(self) -> HostListener:
        listener = HostListener()
        self._on_close("host listener", listener.close)
        return listener

    def close(self) -> None:
        errors = []
        while self._undo:
            what, undo = self._undo.pop()
            try:
                undo()
            except docker.errors.NotFound:
                continue
            except Exception as failure:  # noqa: BLE001 -- every object gets its chance; reported below
                errors.append(f"{what}: {failure}")
        assert not errors, f"lab cleanup failed: {errors}"


def _disconnect(net, container) -> None:
    with contextlib.suppress(docker.errors.NotFound):
        net.disconnect(container, force=True)


def log_lines(container) -> list[str]:
    return container.logs().decode(errors="replace").splitlines()


def mark(container, address: str, port: int) -> int:
    """Sends a unique marker from the host to a SERVER at `address:port` and waits until `docker logs`
    shows it (the log is copied asynchronously); returns the number of lines up to it. Lines after that
    index are newer than everything before the call, controls included."""
    token = f"mark-{secrets.token_hex(4)}"
    assert host_tcp(address, port, payload=token).startswith("connected"), f"{container.name} does not answer"

    def position() -> int | None:
        lines = log_lines(container)
        found = [i for i, line in enumerate(lines) if line.endswith(f" {token}")]
        return found[0] + 1 if found else None

    return wait_until(position, 10, what=f"marker in the logs of {container.name}")


def peers_in(lines: list[str]) -> set[str]:
    """Peer addresses in SERVER log lines ("<proto> <port> <peer> ...")."""
    return {line.split()[2] for line in lines if line.split()[:1] in (["tcp"], ["udp"], ["dns"])}


def netns_address(index: int) -> str:
    """The address `Lab.netns(name, index, ...)` gives its namespace (known before it exists, e.g. for a
    spec's deny entry)."""
    # 2,000 processes of 8 namespaces stay inside 198.18.0.0/16: 198.19.0.0/16 is the deployments' (testbed/deploy.py).
    return str(ipaddress.ip_address("198.18.0.0") + 4 * (os.getpid() % 2000 * 8 + index) + 2)


class Netns:
    def __init__(self, name: str, veth: str, index: int, specs: list[str], address: str | None = None):
        self.name, self.index, self.specs = name, index, specs
        self.host_if, self.ns_if = f"{veth}h", f"{veth}n"
        self.ip = address or netns_address(index)
        self.host_ip = str(ipaddress.ip_address(self.ip) - 1)
        self.log = Path(f"/tmp/{name}.log")
        self.process: subprocess.Popen | None = None

    def _ip(self, *args: str, ns: bool = False) -> None:
        cmd = (["ip", "netns", "exec", self.name] if ns else []) + ["ip", *args]
        subprocess.run(cmd, check=True, capture_output=True, text=True)

    def open(self) -> None:
        subprocess.run(["ip", "netns", "add", self.name], check=True, capture_output=True)
        self._ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        self._ip("link", "set", self.ns_if, "netns", self.name)
        self._ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
        self._ip("link", "set", self.host_if, "up")
        self._ip("addr", "add", f"{self.ip}/30", "dev", self.ns_if, ns=True)
        self._ip("link", "set", self.ns_if, "up", ns=True)
        self._ip("link", "set", "lo", "up", ns=True)
        self._ip("route", "add", "default", "via", self.host_ip, ns=True)
        route = subprocess.run(["ip", "-o", "route", "get", self.ip], capture_output=True, text=True).stdout
        assert f" dev {self.host_if} " in route, f"{self.ip} is not routed to the test namespace: {route}"
        handle = self.log.open("w")
        self.process = subprocess.Popen(["ip", "netns", "exec", self.name, "python3", "-c", SERVER, "netns",
                                         *self.specs], stdout=handle, stderr=subprocess.STDOUT)
        handle.close()
        wait_until(lambda: "ready" in self.log.read_text(), 15, what=f"server in netns {self.name}")

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()  # the one process this object started, by its handle
            self.process.wait(timeout=10)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)  # gone with the netns normally
        self.log.unlink(missing_ok=True)
