"""Probing the network: test servers, attempts from inside a sandbox and from the host.

- `SERVER`: a tiny TCP/UDP/DNS server that logs every peer (test containers, the netns, the sandboxes'
  own command), so a refusal is checked from outside too: the target never saw the prober.
- `probe(...)`: TCP/UDP/DNS attempts from inside a sandbox (`docker exec`, as the sandbox user), run in
  parallel with short timeouts; `curl(...)` for HTTP through the sandbox's proxy settings.
- `host_tcp(...)` / `host_dns(...)`: the same attempts from the host itself (controls, published ports).

`SNTEST_DEBUG=1 pytest -s tests/engine/test_network_*.py` prints every probe's raw results.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
from dataclasses import dataclass

SANDBOX_PORT, SANDBOX_UDP_PORT = 8000, 8001

# A test server: `python3 -c SERVER NAME tcp:80 udp:5353 dns:53 ...`. Logs one line per peer to stdout:
# "<proto> <port> <peer-ip> <detail>" (detail: the Host header of an HTTP request, else the first word
# received). TCP: an HTTP request gets `200 "<NAME> <Host header>"`, anything else gets "<NAME>". UDP
# echoes "<NAME>". DNS answers every A query with 198.51.100.53 (TEST-NET-2: never contacted by anything
# here) so a control can tell an answer from silence, or with the address `dns:53=<address>` names.
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
def serve_udp(port, dns, address="198.51.100.53"):
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
        answer = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 5, 4) + socket.inet_aton(address)
        s.sendto(data[:2] + b"\x81\x80" + struct.pack(">HHHH", 1, 1, 0, 0) + question + answer, peer)
threads = []
for spec in specs:
    proto, port = spec.split(":")
    port, _, address = port.partition("=")
    target = serve_tcp if proto == "tcp" else serve_udp
    args = (int(port),) if proto == "tcp" else (int(port), proto == "dns", *([address] if address else []))
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
