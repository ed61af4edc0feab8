"""Shared pieces of the network isolation proofs (`tests/engine/test_network_*.py`).

Every destination these tests try is on this machine: the host's own addresses, the stack's containers,
and objects the tests create themselves (the `Lab`): plain Docker networks with server containers standing
in for "the internet" or "a metadata service" (network aliases, chosen addresses), and a network namespace
behind a veth pair for the one "internet" a routed sandbox can reach through the host's forwarding path
(Docker isolates its bridges from each other, docs/design/engine-findings.md a).

- `NetStack` / `deployed(...)`: one stack per test module through its own `Harness`, always torn down;
  the Lab goes first (a test container still attached to a sandstack network would make its delete fail).
- `SERVER`: a tiny TCP/UDP/DNS server that logs every peer (test containers, the netns, the sandboxes'
  own command), so a refusal is checked from outside too: the target never saw the prober.
- `probe(...)`: TCP/UDP/DNS attempts from inside a sandbox (`docker exec`, as the sandbox user), run in
  parallel with short timeouts; `curl(...)` for HTTP through the sandbox's proxy settings.
- `HostListener`: a TCP and a UDP listener on the host bound to 0.0.0.0, recording who connected.
- `LeakGuard`: a safety net and detector. It drops, in mangle POSTROUTING (after every filter decision,
  so it never changes a verdict), packets from the tests' networks leaving by the default route, and
  counts them: a broken isolation can neither reach outside this machine nor go unnoticed.

`SNTEST_DEBUG=1 pytest -s tests/engine/test_network_*.py` prints every probe's raw results.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import os
import secrets
import shlex
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import docker as docker_sdk
import docker.errors

from components.naming import infra_name
from tests.engine.deploy import Deployment
from tests.engine.harness import coverage
from tests.engine.harness.harness import Harness, RunResult
from tests.engine.harness.teardown import remaining

T = TypeVar("T")
LAB_LABEL = "sandstack.nettest"  # value: "<pid>-<token>"; every Docker object a Lab creates carries it
LAB_PID_LABEL = "sandstack.nettest.pid"
CGROUP_ROOT = Path("/sys/fs/cgroup")
SANDBOX_PORT, SANDBOX_UDP_PORT = 8000, 8001

# A test server: `python3 -c SERVER NAME tcp:80 udp:5353 dns:53 ...`. Logs one line per peer to stdout:
# "<proto> <port> <peer-ip> <detail>" (detail: the Host header of an HTTP request, else the first word
# received). TCP: an HTTP request gets `200 "<NAME> <Host header>"`, anything else gets "<NAME>". UDP echoes "<NAME>". DNS answers every A query with 198.51.100.53 (TEST-NET-2: never
# contacted by anything here) so a control can tell an answer from silence.
SERVER = r'''
import socket, struct, sys, threading
name, specs = sys.argv[1], sys.argv[2:]
lock = threading.Lock()
def log(*parts):
    with lock:
        print(*parts, flush=True)
def serve_tcp(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(64)
    while True:
        conn, peer = s.accept()
        threading.Thread(target=handle_tcp, args=(conn, peer, port), daemon=True).start()
def handle_tcp(conn, peer, port):
    conn.settimeout(3)
    try:
        data = conn.recv(4096)
        host = ""
        for line in data.decode("latin-1").split("\r\n")[1:]:
            if line.lower().startswith("host:"):
                host = line.split(":", 1)[1].strip()
        first = data.split()[:1]
        log("tcp", port, peer[0], host or (first[0].decode("latin-1") if first else "-"))
        if data[:4] in (b"GET ", b"HEAD", b"POST"):
            body = f"{name} {host}\n".encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        else:
            conn.sendall(f"{name}\n".encode())
    except OSError:
        log("tcp", port, peer[0], "-")
    finally:
        conn.close()
def serve_udp(port, dns):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", port))
    while True:
        data, peer = s.recvfrom(4096)
        if not dns:
            log("udp", port, peer[0], "-")
            s.sendto(f"{name}\n".encode(), peer)
            continue
        labels, i = [], 12
        while i < len(data) and data[i]:
            labels.append(data[i + 1:i + 1 + data[i]].decode("latin-1")); i += 1 + data[i]
        qname = ".".join(labels)
        log("dns", port, peer[0], qname or "-")
        question = data[12:i + 5]
        answer = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 5, 4) + bytes([198, 51, 100, 53])
        s.sendto(data[:2] + b"\x81\x80" + struct.pack(">HHHH", 1, 1, 0, 0) + question + answer, peer)
threads = []
for spec in specs:
    proto, port = spec.split(":")
    target = serve_tcp if proto == "tcp" else serve_udp
    args = (int(port),) if proto == "tcp" else (int(port), proto == "dns")
    threads.append(threading.Thread(target=target, args=args, daemon=True))
for t in threads:
    t.start()
log("ready", name)
for t in threads:
    t.join()
'''

# Probes from inside a sandbox: `python3 -c PROBE '<json list>'` prints {label: result}. Results:
# tcp "connected:<banner>" | "timeout" | "refused" | "error:<errno>"; udp "reply:<text>" | "no-reply" |
# "error:..."; dns (one A query to server:53) "answer:<ip>" | "rcode:<n>" | "no-reply" | "error:...";
# resolve (the sandbox's own resolver, getaddrinfo) "resolved:<ip>" | "unresolved:<gai error>"; http (urllib
# with the sandbox's proxy environment) "status:<code>[:<body>]" | "timeout" | "error:...".
PROBE = r'''
import errno, json, random, socket, struct, sys
from concurrent.futures import ThreadPoolExecutor
def err(e):
    return "error:" + (errno.errorcode.get(e.errno or 0) or str(e))
def tcp(p):
    s = socket.socket(); s.settimeout(p.get("timeout", 1.5))
    try:
        s.connect((p["host"], p["port"]))
    except socket.timeout:
        return "timeout"
    except ConnectionRefusedError:
        return "refused"
    except OSError as e:
        return err(e)
    try:
        s.sendall(b"probe\n")
        return "connected:" + s.recv(200).decode(errors="replace").strip()
    except OSError:
        return "connected:"
    finally:
        s.close()
def udp(p):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(p.get("timeout", 1.5))
    try:
        s.sendto(b"probe\n", (p["host"], p["port"]))
        return "reply:" + s.recvfrom(200)[0].decode(errors="replace").strip()
    except socket.timeout:
        return "no-reply"
    except OSError as e:
        return err(e)
def dns(p):
    qid = random.randrange(65536)
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(l)]) + l.encode() for l in p["name"].split(".")) + b"\0" + struct.pack(">HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(p.get("timeout", 2))
    try:
        s.sendto(q, (p["host"], p.get("port", 53)))
        data = s.recvfrom(4096)[0]
    except socket.timeout:
        return "no-reply"
    except OSError as e:
        return err(e)
    rcode, answers = data[3] & 15, struct.unpack(">H", data[6:8])[0]
    if rcode or not answers:
        return f"rcode:{rcode}"
    return "answer:" + ".".join(str(b) for b in data[-4:])
def http(p):
    import urllib.error, urllib.request
    try:
        with urllib.request.urlopen(p["url"], timeout=p.get("timeout", 3)) as r:
            return f"status:{r.status}:" + r.read(200).decode(errors="replace").strip()
    except urllib.error.HTTPError as e:
        return f"status:{e.code}"
    except (socket.timeout, TimeoutError):
        return "timeout"
    except urllib.error.URLError as e:
        reason = e.reason
        return "timeout" if isinstance(reason, (socket.timeout, TimeoutError)) else (
            err(reason) if isinstance(reason, OSError) else f"error:{reason}")
    except OSError as e:
        return err(e)
def resolve(p):
    try:
        return "resolved:" + socket.getaddrinfo(p["name"], 80, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except socket.gaierror as e:
        return f"unresolved:{e.args[0]}"
probes = json.loads(sys.argv[1])
with ThreadPoolExecutor(len(probes) or 1) as pool:
    results = dict(zip(probes, pool.map(lambda label: globals()[probes[label]["kind"]](probes[label]), probes)))
print(json.dumps(results))
'''


def sandbox_command(name: str) -> list[str]:
    """What every test sandbox runs: the logging server on TCP 8000 and UDP 8001, so that "cannot reach
    another sandbox" is tried against a sandbox that really listens."""
    return ["python3", "-c", SERVER, name, f"tcp:{SANDBOX_PORT}", f"udp:{SANDBOX_UDP_PORT}"]


def template(image: str, network: dict, **extra) -> dict:
    """A sandbox template on the Debian test image (python3, curl) running the logging server."""
    return {"base_image": image, "limits": {"cpus": 0.25, "memory": "128MiB", "pids": 64},
            "command": sandbox_command("sandbox"), "network": network, **extra}


# --- probing from inside a sandbox -------------------------------------------------------------------------
def tcp(host: str, port: int, timeout: float = 1.5) -> dict:
    return {"kind": "tcp", "host": host, "port": port, "timeout": timeout}


def udp(host: str, port: int, timeout: float = 1.5) -> dict:
    return {"kind": "udp", "host": host, "port": port, "timeout": timeout}


def dns(server: str, name: str, timeout: float = 2) -> dict:
    return {"kind": "dns", "host": server, "name": name, "timeout": timeout}


def resolve(name: str) -> dict:
    return {"kind": "resolve", "name": name}


def http(url: str, timeout: float = 3) -> dict:
    """A GET with the sandbox's own proxy settings (urllib reads HTTP_PROXY like curl does)."""
    return {"kind": "http", "url": url, "timeout": timeout}


def probe(container, probes: dict[str, dict], timeout: float = 40) -> dict[str, str]:
    """Runs every probe in parallel inside `container` as its own user; returns {label: result}."""
    result = container.exec_run(["timeout", str(int(timeout)), "python3", "-c", PROBE, json.dumps(probes)])
    output = result.output.decode(errors="replace")
    if os.environ.get("SNTEST_DEBUG"):
        print(f"\n[probe {container.name}] {output.strip()}")
    assert result.exit_code == 0, f"probe in {container.name} failed ({result.exit_code}): {output}"
    return json.loads(output.strip().splitlines()[-1])


def got_through(result: str) -> bool:
    """A probe result that shows the destination answered."""
    return result.startswith(("connected", "reply", "answer", "resolved", "refused", "status:2", "status:3"))


def answered(results: dict[str, str]) -> dict[str, str]:
    """The probes that got an answer (the isolation proofs expect none). A TCP "refused" counts as an
    answer: the destination's kernel saw the packet."""
    return {label: r for label, r in results.items() if got_through(r)}


@dataclass(frozen=True)
class Http:
    status: int  # 0 when no HTTP response came back
    exit_code: int  # curl's exit code (7 refused, 28 timeout, 56 reset, ...)
    body: str


def curl(container, url: str, *args: str, timeout: float = 5) -> Http:
    """`curl` inside the sandbox with its own environment (HTTP_PROXY/HTTPS_PROXY as the pool sets them)."""
    cmd = ["curl", "-sS", "-m", str(timeout), "-o", "/dev/stdout", "-w", "\n%{http_code} %{exitcode}", *args, url]
    result = container.exec_run(["timeout", str(int(timeout) + 5), *cmd])
    text = result.output.decode(errors="replace")
    body, _, tail = text.rpartition("\n")
    status, _, code = tail.partition(" ")
    try:
        return Http(int(status), int(code), body.rstrip("\n"))
    except ValueError:
        return Http(0, result.exit_code, text)


# --- from the host -----------------------------------------------------------------------------------------
def host_tcp(host: str, port: int, timeout: float = 2, payload: str = "probe") -> str:
    """A TCP attempt from the host itself, same result strings as the in-sandbox probe."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(payload.encode() + b"\n")
            return "connected:" + s.recv(200).decode(errors="replace").strip()
    except socket.timeout:
        return "timeout"
    except ConnectionRefusedError:
        return "refused"
    except OSError as e:
        return "error:" + (errno.errorcode.get(e.errno or 0) or str(e))


def host_dns(server: str, name: str, timeout: float = 2) -> str:
    """One A query from the host (the control that a test DNS server answers)."""
    query = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
    query += b"".join(bytes([len(part)]) + part.encode() for part in name.split(".")) + b"\0\x00\x01\x00\x01"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        try:
            s.sendto(query, (server, 53))
            data = s.recvfrom(4096)[0]
        except socket.timeout:
            return "no-reply"
    return "answer:" + ".".join(str(b) for b in data[-4:])


def stable_host_addresses() -> list[str]:
    """The host's own IPv4 addresses that are not sandstack or test bridges (those come and go with other
    stacks; an address that vanished mid-test would be routed off this machine): eth0, docker0, ..."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout
    addresses = []
    for line in out.splitlines():
        fields = line.split()
        dev, cidr = fields[1], fields[3]
        if dev == "lo" or dev.startswith(("ss-", "br-", "veth", "snt")):
            continue
        addresses.append(cidr.split("/")[0])
    return addresses


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


# --- test-owned objects ------------------------------------------------------------------------------------
def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_dead_labs(client) -> None:
    """Removes what Labs of test processes that no longer exist left behind (a killed run)."""
    def dead(obj_labels: dict) -> bool:
        pid = (obj_labels or {}).get(LAB_PID_LABEL, "")
        return pid.isdigit() and not _alive(int(pid))

    for c in client.containers.list(all=True, filters={"label": LAB_PID_LABEL}):
        if dead(c.labels):
            c.remove(force=True)
    for n in client.networks.list(filters={"label": LAB_PID_LABEL}):
        if dead(n.attrs.get("Labels")):
            with contextlib.suppress(docker.errors.APIError):
                n.remove()
    for ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n"):
        parts = ns.split()[0].split("-") if ns.strip() else []
        if len(parts) == 3 and parts[0] == "sntest" and parts[1].isdigit() and not _alive(int(parts[1])):
            subprocess.run(["ip", "netns", "del", ns.split()[0]], capture_output=True)
    for table in ("mangle",):
        for rule in _iptables_rules(table, "POSTROUTING"):
            comment = _comment(rule) or ""
            if comment.startswith("sntest-leak-") and not _alive(int(comment.split("-")[2])):
                _iptables_delete(table, rule)


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

    def netns(self, name: str, index: int, specs: list[str]) -> "Netns":
        """A network namespace reached from the host through a veth pair: 198.18.<n>.1 on the host side,
        198.18.<n>.2 inside (198.18.0.0/15 is reserved for benchmarking), running SERVER."""
        ns = Netns(f"sntest-{os.getpid()}-{name}", f"snt{os.getpid() % 100000}{index}", index, specs)
        self._on_close(f"netns {ns.name}", ns.close)
        ns.open()
        return ns

    def host_listener(self) -> HostListener:
        listener = HostListener()
        self._on_close("host listener", listener.close)
        return listener

    def leak_guard(self, subnets: list[str]) -> "LeakGuard":
        guard = LeakGuard(subnets)
        self._on_close("leak guard", guard.close)
        guard.open()
        return guard

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


class Netns:
    def __init__(self, name: str, veth: str, index: int, specs: list[str]):
        self.name, self.index, self.specs = name, index, specs
        self.host_if, self.ns_if = f"{veth}h", f"{veth}n"
        base = ipaddress.ip_address("198.18.0.0") + 4 * (os.getpid() % 4000 * 8 + index)
        self.host_ip, self.ip = str(base + 1), str(base + 2)
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


# --- iptables ----------------------------------------------------------------------------------------------
def _iptables_rules(table: str, chain: str | None = None, binary: str = "iptables", counters: bool = False) -> list[str]:
    cmd = [binary, "-w", "-t", table, "-S"] + ([chain] if chain else []) + (["-v"] if counters else [])
    out = subprocess.run(cmd, capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if line.startswith("-A ")]


def _comment(rule: str) -> str | None:
    words = shlex.split(rule)
    return words[words.index("--comment") + 1] if "--comment" in words else None


def _iptables_delete(table: str, rule: str, binary: str = "iptables") -> None:
    words = shlex.split(rule)
    if "-c" in words:  # counters printed by -v
        i = words.index("-c")
        del words[i:i + 3]
    subprocess.run([binary, "-w", "-t", table, "-D", *words[1:]], capture_output=True)


GUARD_BINARIES = ("iptables-nft", "iptables-legacy", "ip6tables-nft", "ip6tables-legacy")


def guard_rules(stack: str) -> list[str]:
    """Every firewall rule tagged for `stack` ("sandstack:<stack>", exactly), in both iptables backends
    and both address families, prefixed with the binary that lists it."""
    found = []
    for binary in GUARD_BINARIES:
        for rule in _iptables_rules("filter", binary=binary):
            if _comment(rule) == f"sandstack:{stack}":
                found.append(f"{binary} {rule}")
    return found


def remove_guard_rules(stack: str) -> list[str]:
    """Fallback cleanup after a failed test: deletes whatever `guard_rules(stack)` lists."""
    removed = guard_rules(stack)
    for entry in removed:
        binary, rule = entry.split(" ", 1)
        _iptables_delete("filter", rule, binary)
    return removed


def sandbox_cgroups(stack: str) -> list[Path]:
    return sorted(CGROUP_ROOT.glob(f"*/sandstack/sandstack-{stack}-*"))


class LeakGuard:
    """Drops and counts packets from `subnets` leaving by the default route (see the module docstring)."""

    def __init__(self, subnets: list[str]):
        self.subnets = subnets
        self.comment = f"sntest-leak-{os.getpid()}-{secrets.token_hex(3)}"
        route = subprocess.run(["ip", "route", "show", "default"], capture_output=True, text=True).stdout.split()
        self.devices = sorted({route[i + 1] for i, word in enumerate(route) if word == "dev"})

    def _rules(self) -> list[list[str]]:
        return [["POSTROUTING", "-s", subnet, "-o", dev, "-m", "comment", "--comment", self.comment, "-j", "DROP"]
                for subnet in self.subnets for dev in self.devices]

    def open(self) -> None:
        for rule in self._rules():
            subprocess.run(["iptables", "-w", "-t", "mangle", "-I", *rule], check=True, capture_output=True)

    def dropped(self) -> int:
        total = 0
        for rule in _iptables_rules("mangle", "POSTROUTING", counters=True):
            if _comment(rule) == self.comment:
                words = shlex.split(rule)
                total += int(words[words.index("-c") + 1])
        return total

    def close(self) -> None:
        leaked = self.dropped()
        for rule in self._rules():
            subprocess.run(["iptables", "-w", "-t", "mangle", "-D", *rule], capture_output=True)
        assert leaked == 0, f"{leaked} packets from the tests' networks tried to leave this machine (dropped)"


# --- the deployed stack ------------------------------------------------------------------------------------
@dataclass
class NetStack:
    """A module's deployed stack plus its Lab."""

    harness: Harness
    deployment: Deployment
    result: RunResult
    label: str
    lab: Lab
    client: docker_sdk.DockerClient
    extra: dict = field(default_factory=dict)

    @property
    def stack(self) -> str:
        return self.deployment.stack

    def name(self, *parts: str) -> str:
        """Docker name of a stack object: host-level roles (egress network, gateway, guard) use the '_' form
        of `components.naming.infra_name`, pool objects the '-' form."""
        if parts in (("egress",), ("gateway",), ("guard",)):
            return infra_name(self.stack, parts[0])
        return "-".join(("sandstack", self.stack, *parts))

    def sandbox(self, pool: str, index: int = 0):
        return self.client.containers.get(self.name(pool, str(index)))

    @property
    def gateway(self):
        return self.client.containers.get(self.name("gateway"))

    @property
    def guard(self):
        return self.client.containers.get(self.name("guard"))

    def network(self, role: str):
        return self.client.networks.get(self.name(role))

    def ip(self, container, role: str | None = None) -> str:
        """`container`'s address on the stack network `role` (pool name or "egress"), or its only one."""
        container.reload()
        networks = container.attrs["NetworkSettings"]["Networks"]
        if role is None:
            assert len(networks) == 1, f"{container.name} is on {sorted(networks)}"
            return next(iter(networks.values()))["IPAddress"]
        return networks[self.name(role) if not role.startswith("sntest-") else role]["IPAddress"]

    def bridge_gateway(self, role: str) -> str:
        """The host's own address on a stack network's bridge."""
        return self.network(role).attrs["IPAM"]["Config"][0]["Gateway"]

    def subnets(self) -> list[str]:
        nets = self.client.networks.list(filters={"label": f"sandstack.stack={self.stack}"})
        return [cfg["Subnet"] for n in nets for cfg in n.attrs["IPAM"]["Config"]]

    def gateway_port(self, pool: str) -> int:
        env = dict(e.split("=", 1) for e in self.sandbox(pool).attrs["Config"]["Env"])
        return int(env["HTTP_PROXY"].rsplit(":", 1)[1])

    def proves(self, *fields: str) -> None:
        """`harness.proves(...)`, checked like the `docker_harness` fixture checks it: each field must have
        been applied to the engine by this module's deployment."""
        self.harness.proves(*fields)
        unapplied = [f for f in fields if self.label not in coverage.tests_using(f)]
        assert not unapplied, f"{self.label} never applied {unapplied} to the engine"

    def wait_serving(self, pools: dict[str, int]) -> None:
        """Waits until every sandbox's own server answers inside it (the supervisor starts the command once
        the guard is ready)."""
        for pool, replicas in pools.items():
            for i in range(replicas):
                box = self.sandbox(pool, i)
                wait_until(lambda: probe(box, {"self": tcp("127.0.0.1", SANDBOX_PORT)})["self"].startswith(
                    "connected"), 30, what=f"{box.name} to serve")


@contextlib.contextmanager
def deployed(module_file: str, tag: str, workdir: Path, spec_text: str, client, image: str,
             pools: dict[str, int]) -> Iterator[NetStack]:
    """Deploys `spec_text` once for a test module (stack name `n<tag><pid>`), yields it with a fresh Lab,
    and always removes the Lab first, then the stack, then checks the host is clean."""
    sweep_dead_labs(client)
    label = f"{Path(module_file).relative_to(Path(__file__).parents[2])}::<module deployment>"
    harness = Harness()
    deployment = Deployment(harness, workdir, stack=f"n{tag}{os.getpid() % 10000}")
    lab = Lab(client, image)
    try:
        previous = os.environ.get("PYTEST_CURRENT_TEST")
        # Field uses are recorded against PYTEST_CURRENT_TEST: name the module's deployment.
        os.environ["PYTEST_CURRENT_TEST"] = f"{label} (setup)"
        try:
            result = deployment.up(spec_text)
        finally:
            if previous is None:
                os.environ.pop("PYTEST_CURRENT_TEST", None)
            else:
                os.environ["PYTEST_CURRENT_TEST"] = previous
        net = NetStack(harness, deployment, result, label, lab, client)
        lab.leak_guard(net.subnets())
        net.wait_serving(pools)
        yield net
    finally:
        try:
            lab.close()
        finally:
            harness.teardown()
            left = remaining(harness.backend.api, harness.session_id)
            clean = wait_until(lambda: not (guard_rules(deployment.stack) or sandbox_cgroups(deployment.stack)),
                               15, what="guard cleanup", check=False)
            rules, dirs = remove_guard_rules(deployment.stack), sandbox_cgroups(deployment.stack)
            for d in dirs:
                with contextlib.suppress(OSError):
                    d.rmdir()
            assert not left, f"harness session {harness.session_id} left objects behind: {left}"
            assert clean, f"stack {deployment.stack} left host state behind: {rules + [str(d) for d in dirs]}"


def wait_until(predicate: Callable[[], T], timeout: float, interval: float = 0.2, what: str = "condition",
               check: bool = True) -> T:
    """Polls `predicate` until it returns something truthy or `timeout` seconds pass (bounded waits only)."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = predicate()
    if not value and check:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")
    return value
