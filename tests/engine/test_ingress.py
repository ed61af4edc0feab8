"""URLs for sandbox ports on the real engine: the host's ingress (Caddy) routes `https://<port>-<pool>-<i>.<domain>`
by host name to that sandbox and port over the pool's internal network; any other name gets a 404; the sandbox
learns its URLs from its environment; and the ingress gives the sandbox no way out and no way to the proxy."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from testbed.deploy import engine_spec, shared_deployment
from tests.engine.sandbox_helpers import sh
from testbed.waiting import wait_until

pytestmark = pytest.mark.docker

DOMAIN = "sbx.test"
PORT = 18443  # the ingress's port on the host's loopback for this test
# Each sandbox serves its own hostname on 8080 and 8081, so a response names the sandbox and port it came from.
SERVE = ("for p in 8080 8081; do mkdir -p /tmp/$p && echo \"$(hostname):$p\" > /tmp/$p/who; "
         "python3 -m http.server $p --directory /tmp/$p >/dev/null 2>&1 & done; wait")


def _spec(image: str) -> str:
    data = yaml.safe_load(engine_spec(image, {"web": {
        "base_image": image, "command": ["sh", "-c", SERVE], "limits": {"memory": "128MiB"},
        "ports": [{"port": 8080, "exposure": "url", "name": "app"}, {"port": 8081, "exposure": "url"}],
    }}, {"web": {"template": "web", "hosts": ["local"], "replicas": 2}}))
    data["hosts"]["local"]["ingress"] = {"domain": DOMAIN, "port": PORT, "exposure": "host"}
    return yaml.safe_dump(data, sort_keys=False)


def _get(name: str) -> tuple[int, str]:
    """An HTTPS request from the host to the ingress for `name` (Caddy's local CA signs it: -k)."""
    out = subprocess.run(["curl", "-sk", "--max-time", "5", "--resolve", f"{name}:{PORT}:127.0.0.1",
                          "-w", "\n%{http_code}", f"https://{name}:{PORT}/who"], capture_output=True, text=True)
    body, _, code = out.stdout.rpartition("\n")
    return int(code or 0), body.strip()


@pytest.fixture(scope="module")
def stack(debian_image, harness_sweep_orphans, tmp_path_factory):
    with shared_deployment(__file__, tmp_path_factory.mktemp("ingress"), _spec(debian_image)) as shared:
        yield shared


def test_each_url_reaches_its_own_sandbox_and_port_and_nothing_else(stack):
    # (The ingress joins the pool networks at its fixed addresses through its reload container, not a provider field.)
    stack.proves("Container.ports.ip")

    def answered(name: str) -> bool:
        return _get(name)[0] == 200

    wait_until(lambda: answered(f"8080-web-0.{DOMAIN}") and answered(f"8081-web-1.{DOMAIN}"), 30,
               what="the ingress to serve both sandboxes")
    for index in (0, 1):
        for port in (8080, 8081):
            assert _get(f"{port}-web-{index}.{DOMAIN}") == (200, f"web-{index}:{port}")
    # Names no sandbox port has: the proxy's answer of a site that serves nothing now (a stopped sandbox's too), never
    # a guess at an upstream.
    for name in (f"9999-web-0.{DOMAIN}", f"8080-web-2.{DOMAIN}", f"8080-other-0.{DOMAIN}", f"web-0.{DOMAIN}"):
        assert _get(name) == (502, "sandbox not running"), name


def test_a_sandbox_knows_its_urls_and_its_ports_are_not_published(stack, docker_client):
    sandbox = stack.container("web", 1)
    env = dict(line.split("=", 1) for line in sandbox.attrs["Config"]["Env"])
    assert env["SANDSTACK_URL_APP"] == f"https://8080-web-1.{DOMAIN}:{PORT}"
    assert env["SANDSTACK_URL_8081"] == f"https://8081-web-1.{DOMAIN}:{PORT}"
    assert env["SANDSTACK_PUBLIC_HOSTNAME"] == f"web-1.{DOMAIN}"
    assert sandbox.attrs["HostConfig"]["PortBindings"] in ({}, None)
    outputs = {s["container"]: s for s in stack.result.outputs["sandboxes"]}
    assert [p["address"] for p in outputs[sandbox.name]["ports"]] == [env["SANDSTACK_URL_APP"],
                                                                       env["SANDSTACK_URL_8081"]]
    # The pool network stays internal: the ingress added no route out.
    network = docker_client.networks.get(stack.name("web"))
    assert network.attrs["Internal"] is True


def test_from_inside_a_sandbox_neither_the_ingress_nor_the_other_sandbox_is_reachable(stack, docker_client):
    sandbox = stack.container("web", 0)
    ingress = docker_client.containers.get(stack.name("ingress"))
    address = ingress.attrs["NetworkSettings"]["Networks"][stack.name("web")]["IPAddress"]
    probe = ("import socket, sys\n"
             "for host, port in [(sys.argv[1], 8443), (sys.argv[1], 8080), (sys.argv[1], 8081)]:\n"
             "    s = socket.socket(); s.settimeout(2)\n"
             "    try:\n        s.connect((host, port)); print(host, port, 'connected')\n"
             "    except OSError as e:\n        print(host, port, type(e).__name__)\n")
    code, out = sh(sandbox, f"python3 -c \"{probe}\" {address}")
    assert code == 0 and "connected" not in out, out
    # And the other sandbox of the pool stays out of reach too (icc off; only the proxy may open its ports).
    other = stack.container("web", 1).attrs["NetworkSettings"]["Networks"][stack.name("web")]["IPAddress"]
    code, out = sh(sandbox, f"python3 -c \"{probe}\" {other}")
    assert "connected" not in out, out
