"""A URL request wakes a hibernated session's sandbox on the real engine (docs/design/ondemand.md, "Waking on a URL
request"): a client on this machine asks the ingress for a hibernated sandbox's URL, the request waits while the
ingress has the runtime resume it, and is then served by it, which runs again afterwards; a request with a body
wakes it too and is answered 503 with Retry-After (its body is gone), its retry served whole; a site whose sandbox has
no session wakes nothing and gets a 502 at once; the runtime and the ingress hold the same derived wake token, which
the Caddyfile only names; and no sandbox reaches the runtime's address on the ingress's network."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sandstack.plan.naming import infra_name
from sandstack.plan.runtime import ENV_WAKE_TOKEN
from testbed.deploy import engine_spec, shared_deployment
from testbed.waiting import wait_until
from tests.engine.runtime_helpers import answers, local_client
from tests.engine.sandbox_helpers import sh

pytestmark = pytest.mark.docker

DOMAIN = "sbx.test"
INGRESS_PORT = 18444
PORT = 17534
TOKEN = "engine-test-runtime-token-wake-0001"
# The sandbox answers a GET on 8080 with its hostname and a POST with the body it received.
SERVE = """
import http.server, socket
class Echo(http.server.BaseHTTPRequestHandler):
    def answer(self, body):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self.answer(str(self.headers).encode() if self.path == "/headers" else socket.gethostname().encode())
    def do_POST(self):
        self.answer(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
http.server.ThreadingHTTPServer(("", 8080), Echo).serve_forever()
"""
PROBE = ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/who', timeout=1)"]


def _spec(image: str) -> str:
    template = {"base_image": image, "command": ["python3", "-c", SERVE], "limits": {"memory": "128MiB"},
                "readiness": {"command": PROBE, "interval": "1s"},
                "ports": [{"port": 8080, "exposure": "url", "name": "app"}], "session": {"idle": "never"}}
    # The same app behind `urls.auth: session` (docs/design/ingress.md, "Who may open a URL").
    authed = {**template, "urls": {"auth": "session"}}
    data = yaml.safe_load(engine_spec(image, {"web": template, "authed": authed},
                                      {"web": {"template": "web", "hosts": ["local"], "replicas": 1, "max": 2},
                                       "authed": {"template": "authed", "hosts": ["local"], "replicas": 1}}))
    data["hosts"]["local"]["ingress"] = {"domain": DOMAIN, "port": INGRESS_PORT, "exposure": "host"}
    data["hosts"]["local"]["runtime"] = {"port": PORT, "token": {"secret": "runtimeToken"}}
    return yaml.safe_dump(data, sort_keys=False)


def _get(name: str, max_time: int = 60, *, data: Path | None = None, headers: Path | None = None,
         path: str = "/who", send: tuple[str, ...] = ()) -> tuple[int, str, float]:
    """An HTTPS request from this machine to the ingress for `name` (a POST of the file `data` if given; the
    answer's headers written to `headers` if given): status, body, seconds it took."""
    start = time.monotonic()
    post = ["--data-binary", f"@{data}", "-H", "Content-Type: application/octet-stream"] if data else []
    post += ["-D", str(headers)] if headers else []
    post += [arg for header in send for arg in ("-H", header)]
    out = subprocess.run(["curl", "-sk", "--max-time", str(max_time), "--resolve",
                          f"{name}:{INGRESS_PORT}:127.0.0.1", "-w", "\n%{http_code}", *post,
                          f"https://{name}:{INGRESS_PORT}{path}"], capture_output=True, text=True)
    body, _, code = out.stdout.rpartition("\n")
    return int(code or 0), body.strip(), time.monotonic() - start


@pytest.fixture(scope="module")
def stack(debian_image, harness_sweep_orphans, tmp_path_factory):
    with shared_deployment(__file__, tmp_path_factory.mktemp("ingress-wake"), _spec(debian_image),
                           secret_config={"runtimeToken": TOKEN}) as shared:
        wait_until(lambda: answers(PORT), 60, what="the runtime to answer")
        yield shared


@pytest.fixture
def client(stack):
    with local_client(PORT, TOKEN, ["web", "authed"], timeout=120) as c:
        yield c


def test_a_hibernated_sessions_url_wakes_its_sandbox_and_is_served(stack, client, docker_client):
    stack.proves("Network.ipamConfigs.subnet", "Container.networksAdvanced.ipv4Address", "Container.dns")
    name = f"8080-web-0.{DOMAIN}"
    wait_until(lambda: _get(name, 5)[0] == 200, 30, what="the ingress to serve the warm sandbox")
    sandbox = client.claim("web", "chat-1")
    assert sandbox.name == stack.name("web", "0")
    assert sandbox.hibernate()["status"] == "hibernated"
    assert docker_client.containers.get(sandbox.name).status == "exited"
    code, body, _ = _get(name)
    assert (code, body) == (200, "web-0")  # the request waited for the wake, then the sandbox answered it
    assert sandbox.status()["status"] == "bound"
    assert docker_client.containers.get(sandbox.name).status == "running"
    # The runtime's audit log names the ingress's scope for the wake, never a token.
    woke = [line for line in client.host("local").audit() if line["operation"] == "wake"]
    assert [(w["scope"], w["status"], w["sandbox"], w["session"]) for w in woke] == [
        ("ingress-wake", 200, sandbox.name, "chat-1")]


def test_a_request_with_a_body_wakes_the_sandbox_and_is_asked_again_then_served_whole(stack, client, docker_client,
                                                                                      tmp_path):
    # The first try at the hibernated sandbox closed the request's body (Go's transport does on a failed dial): the
    # ingress wakes the sandbox and answers 503 with Retry-After rather than send the request on without its body.
    name = f"8080-web-0.{DOMAIN}"
    wait_until(lambda: _get(name, 5)[0] == 200, 30, what="the ingress to serve the warm sandbox")
    sandbox = client.claim("web", "chat-1")
    assert sandbox.name == stack.name("web", "0")
    assert sandbox.hibernate()["status"] == "hibernated"
    body = "".join(f"line {i} of the posted body\n" for i in range(4000))  # 100 KB
    (tmp_path / "body").write_text(body)
    code, answer, _ = _get(name, data=tmp_path / "body", headers=tmp_path / "headers")
    assert (code, answer) == (503, "sandbox woke: send the request again")
    fields = dict(line.split(":", 1) for line in (tmp_path / "headers").read_text().splitlines()[1:] if ":" in line)
    assert {k.lower(): v.strip() for k, v in fields.items()}["retry-after"] == "1"
    assert docker_client.containers.get(sandbox.name).status == "running"
    woke = [line for line in client.host("local").audit() if line["operation"] == "wake"][-1]
    assert (woke["status"], woke["sandbox"]) == (200, sandbox.name)
    # The same request again: the sandbox is awake and gets all of it.
    code, answer, _ = _get(name, data=tmp_path / "body")
    assert (code, len(answer), answer == body.strip()) == (200, len(body.strip()), True)


def test_a_site_without_a_session_wakes_nothing_and_gets_a_502_at_once(stack, client, docker_client):
    # Place 1 is on demand and absent: no container to serve, no session to wake.
    code, body, took = _get(f"8080-web-1.{DOMAIN}")
    assert (code, body) == (502, "sandbox not running")
    assert took < 10, f"took {took:.1f}s"  # the runtime's 409 ends it: no retry for the retry duration
    assert docker_client.containers.list(all=True, filters={"name": f"^{stack.name('web', '1')}$"}) == []
    assert [s["status"] for s in client.host("local").sandboxes("web") if s["sandbox"] == stack.name("web", "1")] \
        == ["absent"]
    # The runtime refused the wake (409: nothing to wake) and the ingress showed none of its answer.
    refused = [line for line in client.host("local").audit() if line["operation"] == "wake"][-1]
    assert (refused["scope"], refused["status"], refused["sandbox"]) == ("ingress-wake", 409, stack.name("web", "1"))


def test_the_wake_token_is_the_same_in_runtime_and_ingress_and_not_in_the_caddyfile(stack, docker_client):
    envs = {role: dict(line.split("=", 1) for line in
                       docker_client.containers.get(stack.name(role)).attrs["Config"]["Env"])
            for role in ("runtime", "ingress")}
    token = envs["runtime"][ENV_WAKE_TOKEN]
    assert envs["ingress"][ENV_WAKE_TOKEN] == token and len(token) == 64 and token != TOKEN
    # The Caddyfile is the ingress's configuration, delivered by its reload container (docs/design/live-changes.md).
    reload = dict(line.split("=", 1) for line in docker_client.containers.get(
        infra_name(stack.stack, "ingress-reload")).attrs["Config"]["Env"])
    assert "/v1/wake" in reload["SANDSTACK_CADDYFILE"]
    assert token not in reload["SANDSTACK_CADDYFILE"] and TOKEN not in str(envs["ingress"]) + str(reload)


def test_no_sandbox_reaches_the_runtime_on_the_ingress_network(stack, docker_client):
    network = docker_client.networks.get(infra_name(stack.stack, "ingress-net"))  # its bridge: the runtime's address
    address = network.attrs["IPAM"]["Config"][0]["Gateway"]
    probe = ("import socket, sys\ns = socket.socket(); s.settimeout(3)\n"
             "try:\n    s.connect((sys.argv[1], int(sys.argv[2]))); print('connected')\n"
             "except OSError as e:\n    print(type(e).__name__)\n")
    code, out = sh(stack.container("web", 0), f"python3 -c \"{probe}\" {address} {PORT}")
    assert code == 0 and "connected" not in out, out


PROBE_CONNECT = ("import socket, sys\ns = socket.socket(); s.settimeout(3)\n"
                 "try:\n    s.connect((sys.argv[1], int(sys.argv[2]))); print('connected')\n"
                 "except OSError as e:\n    print(type(e).__name__)\n")
NETNS, VETH = "sswake", "sswake"  # a machine that routes the ingress's subnet through this host


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def test_the_runtime_listens_on_no_address_of_the_ingress_network_from_docker_bridge_or_a_routed_machine(
        stack, debian_image, docker_client):
    # That address is the host's, and Linux answers on it whatever way a packet comes in (issue 34 item 9). The
    # runtime listens there no more (the ingress reaches it by its socket): nothing answers on the runtime's port,
    # from Docker's default bridge or from a machine routing the ingress's subnet through the host.
    network = docker_client.networks.get(infra_name(stack.stack, "ingress-net"))
    address, subnet = network.attrs["IPAM"]["Config"][0]["Gateway"], network.attrs["IPAM"]["Config"][0]["Subnet"]
    out = docker_client.containers.run(debian_image, ["python3", "-c", PROBE_CONNECT, address, str(PORT)],
                                       network="bridge", remove=True, network_disabled=False).decode()
    assert out.strip() == "ConnectionRefusedError", out  # nothing listens there
    _run("ip", "netns", "add", NETNS)
    try:
        _run("ip", "link", "add", f"{VETH}-h", "type", "veth", "peer", "name", f"{VETH}-n", "netns", NETNS)
        _run("ip", "addr", "add", "10.250.250.1/30", "dev", f"{VETH}-h")
        _run("ip", "link", "set", f"{VETH}-h", "up")
        for cmd in (["ip", "addr", "add", "10.250.250.2/30", "dev", f"{VETH}-n"], ["ip", "link", "set", "lo", "up"],
                    ["ip", "link", "set", f"{VETH}-n", "up"], ["ip", "route", "add", subnet, "via", "10.250.250.1"]):
            _run("ip", "netns", "exec", NETNS, *cmd)
        # The way there works (a port of the host's answers on its veth address), so a refusal is the address's.
        with socket.socket() as listening:
            listening.bind(("10.250.250.1", 0))
            listening.listen()
            way = _run("ip", "netns", "exec", NETNS, "python3", "-c", PROBE_CONNECT, "10.250.250.1",
                       str(listening.getsockname()[1]))
        assert way.strip() == "connected", way
        routed = _run("ip", "netns", "exec", NETNS, "python3", "-c", PROBE_CONNECT, address, str(PORT))
        assert routed.strip() == "ConnectionRefusedError", routed
    finally:
        subprocess.run(["ip", "netns", "del", NETNS], capture_output=True)
        subprocess.run(["ip", "link", "del", f"{VETH}-h"], capture_output=True)


# Opens as many connections as the process may from 127.0.0.2, each with a request head that never ends, holds them
# for argv[3] seconds and prints how many the server closed and how many it still holds.
SLOW_LORIS = r"""
import resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
port, count, hold = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
held = []
for _ in range(count):
    s = socket.socket()
    s.bind(("127.0.0.2", 0))
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", port))
    held.append(s)
print("opened", len(held), flush=True)
time.sleep(2)
for s in held:
    try:
        s.send(b"GET /healthz HTTP/1.1\r\nHost: runtime\r\n")
    except OSError:
        pass
time.sleep(hold)
closed = 0
for s in held:
    try:
        closed += s.recv(1) == b""
    except BlockingIOError:
        pass
    except OSError:
        closed += 1
print("closed", closed, "held", len(held) - closed, flush=True)
"""


def test_a_slow_loris_from_one_source_leaves_platform_calls_answering(stack, client):
    # 19,995 stalled heads filled the runtime's 20,000 descriptors and every platform call failed for ~43 s.
    count = min(resource_limit() - 200, 19_000)
    loris = subprocess.Popen([sys.executable, "-c", SLOW_LORIS, str(PORT), str(count), "25"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert loris.stdout.readline().split() == ["opened", str(count)]
        for _ in range(10):  # while they are held: the platform's calls, from 127.0.0.1, answer
            assert stack.name("web", "0") in [s["sandbox"] for s in client.host("local").sandboxes("web")]
            time.sleep(1)
        out, _ = loris.communicate(timeout=120)
    finally:
        loris.kill()
    closed = int(out.split()[1])
    # Past its share a source's connections are closed at once, and the stalled heads it kept are closed too.
    assert closed == count, out
    assert stack.name("web", "0") in [s["sandbox"] for s in client.host("local").sandboxes("web")]


def resource_limit() -> int:
    import resource
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def _refused(site: str, *send: str) -> tuple[int, str]:
    code, body, _ = _get(site, send=send)
    return code, json.loads(body or "{}").get("error", body)


def test_a_session_url_answers_only_its_sessions_token_and_the_app_never_sees_it(stack, client, tmp_path):
    site = f"8080-authed-0.{DOMAIN}"
    refused = (401, "a session token for this site is required")
    assert _refused(site) == refused  # no session, no token
    sandbox = client.claim("authed", "url-auth-1")
    other = client.claim("web", "url-auth-2")
    assert _refused(site) == refused
    assert _refused(site, f"X-Sandstack-Token: {other.token}") == refused  # another session's
    code, body, _ = _get(site, path="/headers", send=(f"X-Sandstack-Token: {sandbox.token}", "Cookie: theme=dark"))
    assert code == 200 and "theme=dark" in body and sandbox.token not in body and "X-Sandstack-Token" not in body
    # A browser's first visit: the token in the URL is swapped for a cookie, and the cookie then opens the site.
    headers = tmp_path / "headers"
    code, _, _ = _get(site, path=f"/headers?x=1&sandstack_token={sandbox.token}", headers=headers)
    seen = headers.read_text().lower()
    assert code == 303 and "location: /headers?x=1" in [line.strip() for line in seen.splitlines()], seen
    assert f"set-cookie: sandstack_session={sandbox.token.lower()};" in seen and "httponly" in seen
    code, body, _ = _get(site, path="/headers", send=(f"Cookie: theme=dark; sandstack_session={sandbox.token}",))
    assert code == 200 and "theme=dark" in body and "sandstack_session" not in body, body
    sandbox.release()
    assert _refused(site, f"X-Sandstack-Token: {sandbox.token}") == refused  # released: its token ended
    # The unauthenticated web pool is as open as before.
    assert _get(f"8080-web-0.{DOMAIN}")[0] == 200
