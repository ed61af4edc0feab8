"""Proofs on a real Docker engine: the gateway gives a sandbox nothing beyond its policy and leaks nothing.

One stack for the module: pool `listed` (allow-list: `web.test`, `ported.test:8080`) and pool `open`
(allow-all, logged, deny `blocked.test`, 2 replicas). "The internet" is one echo server on the stack's egress
network (aliases web.test, ported.test, blocked.test, x.blocked.test) on ports 80, 443, 22 and 8080: it
answers every HTTP request with that request's own head, so the test sees exactly what the gateway sent,
and logs one line per connection, so "refused" is also checked as "never arrived". Every destination is
a container this module starts or the gateway itself.
"""

from __future__ import annotations

import json
import secrets

import pytest

from sandstack.plan.gateway import ERROR_PAGE
from sandstack.plan.network import GATEWAY_CONNECTIONS_PER_SANDBOX
from sandstack.plan.squid import MAX_FILEDESCRIPTORS
from testbed.deploy import engine_spec
from tests.engine.net.lab import log_lines, mark
from tests.engine.net.probes import curl, template
from tests.engine.net.stack import access_log, deployed
from testbed.waiting import wait_until

pytestmark = pytest.mark.docker

LISTED = {"egress": "allow-list", "allow": ["web.test", "ported.test:8080"]}
OPEN = {"egress": "allow-all", "deny": ["blocked.test"]}
ALIASES = ["web.test", "ported.test", "blocked.test", "x.blocked.test"]
ECHO_PORTS = (80, 443, 22, 8080)
REFUSED = ERROR_PAGE.replace("%c", "ERR_ACCESS_DENIED")
CONNECT_REFUSED = 56  # curl's exit code when the proxy answers CONNECT with an error

# `python3 -c ECHO_SERVER PORT...`. Logs "tcp <port> <peer> <Host> <target>" per HTTP request ("tcp <port>
# <peer> <first word>" otherwise, which is what `mark` sends). Answers an HTTP request with its own head
# as a text/plain body; a target starting with /slow is held 20 s first (a request still in flight).
ECHO_SERVER = r'''
import socket, sys, threading, time
lock = threading.Lock()
def log(*parts):
    with lock:
        print(*parts, flush=True)
def handle(conn, peer, port):
    conn.settimeout(5)
    try:
        data = conn.recv(65536)
        first = data.split(b"\r\n")[0].decode("latin-1")
        if " HTTP/" not in first:
            log("tcp", port, peer[0], (first.split() or ["-"])[0])
            conn.sendall(b"echo\n")
            return
        while b"\r\n\r\n" not in data:
            more = conn.recv(65536)
            if not more:
                break
            data += more
        head = data.split(b"\r\n\r\n")[0]
        host = [l.split(b":", 1)[1].strip() for l in head.split(b"\r\n")[1:] if l.lower().startswith(b"host:")]
        log("tcp", port, peer[0], (host or [b"-"])[0].decode("latin-1"), first.split()[1])
        if first.split()[1].startswith("/slow"):
            time.sleep(20)
        body = head + b"\n"
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n" % len(body) + body)
    except OSError:
        log("tcp", port, peer[0], "-")
    finally:
        conn.close()
def serve(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(64)
    while True:
        conn, peer = s.accept()
        threading.Thread(target=handle, args=(conn, peer, port), daemon=True).start()
for p in sys.argv[1:]:
    threading.Thread(target=serve, args=(int(p),), daemon=True).start()
log("ready")
threading.Event().wait()
'''

# Inside a sandbox: holds N idle connections to its gateway port, asks once more over a new one, says
# "held", keeps holding 8 s (the test asks from a neighbour meanwhile), lets go, asks again; prints both
# outcomes: the status, or "refused" when the connection itself was refused (the guard's reset).
HOLD = r'''
import json, socket, sys, time
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def get():
    try:
        s = socket.create_connection((host, port), timeout=10)
    except ConnectionRefusedError:
        return "refused"
    s.sendall(b"GET http://web.test/ HTTP/1.1\r\nHost: web.test\r\nConnection: close\r\n\r\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    return int(data.split()[1])
held = [socket.create_connection((host, port), timeout=10) for _ in range(count)]
over_cap = get()
print("held", flush=True)
time.sleep(8)
for s in held:
    s.close()
time.sleep(1)
print(json.dumps({"over_cap": over_cap, "after": get()}), flush=True)
'''


def _echo_server(stack):
    """The echo server on the stack's egress network with ALIASES, labelled like a Lab's containers (so a
    killed run's copy is swept); the fixture removes it before the Lab and the stack go."""
    lab, network = stack.lab, stack.client.networks.get(stack.name("egress"))
    container = lab.client.containers.create(
        lab.image, ["python3", "-c", ECHO_SERVER, *map(str, ECHO_PORTS)], name=f"sntest-{lab.token}-echo",
        labels=lab.labels, network=network.name, detach=True)
    try:
        network.disconnect(container)  # create() only names the network: reconnect with the aliases
        network.connect(container, aliases=ALIASES)
        container.start()
        wait_until(lambda: "ready" in container.logs().decode(), 15, what=f"{container.name} to listen")
    except BaseException:
        container.remove(force=True)
        raise
    return container


@pytest.fixture(scope="module")
def net(docker_client, debian_image, harness_sweep_orphans, tmp_path_factory):
    spec = engine_spec(debian_image, {
        "listed": template(debian_image, LISTED),
        "open": template(debian_image, OPEN),
    }, {
        "listed": {"template": "listed", "hosts": ["local"]},
        "open": {"template": "open", "hosts": ["local"], "replicas": 2},
    })
    with deployed(__file__, "gh", tmp_path_factory.mktemp("gateway-hardening"), spec, docker_client, debian_image,
                  {"listed": 1, "open": 2}) as stack:
        echo = _echo_server(stack)
        try:
            stack.extra["echo"] = echo
            yield stack
        finally:
            echo.remove(force=True)


def _proxy(net, pool: str) -> str:
    return f"http://sandstack-gateway:{net.gateway_port(pool)}"


def _mark(net) -> int:
    """Index of the echo server's log just past a marker sent now: every line before it has arrived."""
    echo = net.extra["echo"]
    return mark(echo, net.ip(echo, "egress"), 80)


def _seen(net, since: int) -> list[str]:
    """The echo server's log lines between the marker at `since` and one sent now, without markers."""
    end = _mark(net)
    return log_lines(net.extra["echo"])[since:end - 1]


def _denied_in_access_log(net, sandbox, since: int, count: int) -> list[str]:
    """The access-log lines of `sandbox`'s requests after line `since`: `count` of them, every one refused."""
    client = f" client={net.ip(sandbox)} "

    def mine() -> list[str]:
        return [line for line in access_log(net)[since:] if client in line]

    lines = wait_until(lambda: mine() if len(mine()) >= count else None, 10, what=f"{count} access-log lines")
    assert len(lines) == count and all("verdict=TCP_DENIED status=403" in line for line in lines), lines
    return lines


MANAGER_PAGES = ["active_requests", "client_list", "fqdncache", "ipcache", "menu"]


@pytest.mark.parametrize("pool", ["listed", "open"])
def test_cache_manager_is_refused_and_shows_no_other_pools_request_in_flight(net, pool):
    net.proves("Container.envs")
    echo, sandbox, proxy = net.extra["echo"], net.sandbox(pool), _proxy(net, pool)
    # Another pool's request, held in flight by the server (from open-1: open-0's log lines must stay its own).
    other = "open" if pool == "listed" else "listed"
    token = f"slow-{secrets.token_hex(4)}"
    net.sandbox(other, 1 if other == "open" else 0).exec_run(
        ["curl", "-s", "-m", "25", f"http://web.test/{token}"], detach=True)
    wait_until(lambda: any(line.endswith(f" /{token}") for line in log_lines(echo)), 10,
               what=f"pool {other}'s request in flight at the server")
    since = len(access_log(net))
    targets = ([f"cache_object://web.test/{page}" for page in MANAGER_PAGES]
               + [f"http://web.test/squid-internal-mgr/{page}" for page in MANAGER_PAGES])
    for target in targets:
        # The request line carries the manager URL; the URL argument only names where curl sends it.
        got = curl(sandbox, "http://web.test/", "--request-target", target)
        assert (got.status, got.body) == (403, REFUSED), (target, got)
    # Addressed to the gateway by its own name, as squid's internal URLs are.
    got = curl(sandbox, f"{proxy}/squid-internal-mgr/active_requests", "-x", proxy, "--noproxy", "")
    assert (got.status, got.body) == (403, REFUSED), got
    _denied_in_access_log(net, sandbox, since, len(targets) + 1)


def test_allow_all_connect_tunnels_to_443_only_and_plain_http_keeps_any_port(net):
    net.proves("Container.envs")
    sandbox = net.sandbox("open")
    since_log, before = _mark(net), len(access_log(net))
    got = curl(sandbox, "http://web.test:443/", "--proxytunnel")
    assert got.status == 200 and got.body.split("\r\n")[:2] == ["GET / HTTP/1.1", "Host: web.test:443"], got
    # Squid logs a tunnel when it closes: wait for that line, so the refusals below are all that follow.
    wait_until(lambda: any(" method=CONNECT dest=web.test:443 verdict=TCP_TUNNEL status=200 " in line
                           for line in access_log(net)[before:]), 10, what="the tunnel's access-log line")
    since_access = len(access_log(net))
    for port in (22, 8080):
        got = curl(sandbox, f"http://web.test:{port}/", "--proxytunnel")
        assert (got.status, got.exit_code) == (0, CONNECT_REFUSED), (port, got)
    lines = _denied_in_access_log(net, sandbox, since_access, 2)
    for port, line in zip((22, 8080), lines, strict=True):
        assert f" method=CONNECT dest=web.test:{port} " in line, line
    assert [line.split()[1] for line in _seen(net, since_log)] == ["443"], "a refused tunnel reached the server"
    # Plain HTTP is forwarded to any port, as before: the gateway speaks HTTP there, not the sandbox's bytes.
    assert curl(sandbox, "http://web.test:22/").status == 200


def test_allow_list_connect_tunnels_to_443_and_the_ports_its_entries_name_only(net):
    net.proves("Container.envs")
    sandbox = net.sandbox("listed")
    for url in ("http://web.test:443/", "http://ported.test:8080/"):
        assert curl(sandbox, url, "--proxytunnel").status == 200, url
    # 'web.test' (no port) allows HTTP on 80 and 443, and a tunnel to 443 only.
    got = curl(sandbox, "http://web.test:80/", "--proxytunnel")
    assert (got.status, got.exit_code) == (0, CONNECT_REFUSED), got
    assert curl(sandbox, "http://web.test/").status == 200


def test_allow_all_refuses_loopback_and_the_gateway_itself_by_name_and_by_address(net):
    net.proves("Container.envs")
    sandbox, gateway, proxy = net.sandbox("open"), net.gateway, _proxy(net, "open")
    gateway.reload()
    hosts = ["localhost", "127.0.0.1", "0.0.0.0", "[::1]", "sandstack-gateway", gateway.attrs["Config"]["Hostname"],
             net.ip(gateway, "egress"), net.ip(gateway, "open")]
    since = len(access_log(net))
    for host in hosts:
        # NO_PROXY keeps loopback names local: force them through the gateway, as an attacker would.
        got = curl(sandbox, f"http://{host}:22/", "-x", proxy, "--noproxy", "")
        assert (got.status, got.body) == (403, REFUSED), (host, got)  # refused, not "could not connect"
        got = curl(sandbox, f"http://{host}:443/", "--proxytunnel", "-x", proxy, "--noproxy", "")
        assert (got.status, got.exit_code) == (0, CONNECT_REFUSED), (host, got)
    _denied_in_access_log(net, sandbox, since, 2 * len(hosts))


def test_a_domain_deny_refuses_its_subdomains_which_never_reach_the_server(net):
    net.proves("Container.envs")
    sandbox = net.sandbox("open")
    since = _mark(net)
    assert curl(sandbox, "http://web.test/").status == 200  # control
    for url in ("http://blocked.test/", "http://x.blocked.test/", "http://x.blocked.test:8080/"):
        got = curl(sandbox, url)
        assert (got.status, got.body) == (403, REFUSED), (url, got)
    assert [line.split()[3] for line in _seen(net, since)] == ["web.test"]


@pytest.mark.parametrize("pool", ["listed", "open"])
def test_destination_sees_no_forwarded_for_no_via_and_nothing_naming_sandbox_or_gateway(net, pool):
    net.proves("Container.envs")
    sandbox, gateway = net.sandbox(pool), net.gateway
    gateway.reload()
    got = curl(sandbox, "http://web.test/")
    assert got.status == 200, got
    head = got.body.split("\r\n")
    assert head[0] == "GET / HTTP/1.1", head
    names = {line.split(":", 1)[0].lower() for line in head[1:]}
    assert not names & {"x-forwarded-for", "forwarded", "via", "x-real-ip"}, head
    for secret in (net.ip(sandbox), gateway.attrs["Config"]["Hostname"], "squid"):
        assert secret not in got.body, (secret, head)


@pytest.mark.parametrize("url, code, status", [("http://blocked.test/", "ERR_ACCESS_DENIED", 403),
                                               ("http://web.test:9/", "ERR_CONNECT_FAIL", 503)])
def test_error_pages_name_neither_the_sandbox_address_nor_squid_or_its_version(net, url, code, status):
    net.proves("Container.envs")
    sandbox, gateway = net.sandbox("open"), net.gateway
    gateway.reload()
    got = curl(sandbox, url, "-D", "/dev/stdout")  # the reply's head, then its body
    head, _, page = got.body.partition("\r\n\r\n")
    assert (got.status, page) == (status, ERROR_PAGE.replace("%c", code)), got
    fields = dict(line.split(": ", 1) for line in head.split("\r\n")[1:])
    assert fields["Server"] == "squid", fields  # no version
    assert not {"X-Squid-Error", "X-Cache", "X-Cache-Lookup", "Via"} & set(fields), fields
    for secret in (net.ip(sandbox), gateway.attrs["Config"]["Hostname"], "squid/"):
        assert secret not in got.body, (secret, got.body)


def test_gateway_squid_has_every_file_descriptor_it_is_configured_for(net):
    net.proves("Container.envs")
    code, out = net.gateway.exec_run(["cat", "/var/log/squid/cache.log"])
    assert code == 0, out
    log = out.decode(errors="replace")
    # Squid takes the lower of max_filedescriptors and the daemon's nofile limit, and says which it got.
    assert f"With {MAX_FILEDESCRIPTORS} file descriptors available" in log, log[-2000:]


def test_one_sandbox_over_its_connection_cap_is_refused_while_its_neighbour_is_served(net):
    net.proves("Container.envs")
    hog, neighbour = net.sandbox("open", 0), net.sandbox("open", 1)
    command = ["timeout", "60", "python3", "-c", HOLD, "sandstack-gateway", str(net.gateway_port("open")),
               str(GATEWAY_CONNECTIONS_PER_SANDBOX)]
    output = ""
    stream = hog.exec_run(command, stream=True).output
    for chunk in stream:
        output += chunk.decode(errors="replace")
        if "held\n" in output:
            break
    assert "held\n" in output, output
    got = curl(neighbour, "http://web.test/")  # while the hog still holds its connections
    for chunk in stream:
        output += chunk.decode(errors="replace")
    assert got.status == 200, got
    # The guard resets the connection past the bound before squid sees it (network_plan's connlimit rule);
    # squid's own cap, at the same bound, would answer 403 if that rule were missing.
    assert json.loads(output.strip().splitlines()[-1]) == {"over_cap": "refused", "after": 200}, output
