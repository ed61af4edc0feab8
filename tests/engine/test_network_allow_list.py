"""Proofs on a real Docker engine: an `allow-list` sandbox reaches exactly its list, through the gateway.

One stack for the module: pool `listed` (allow-list, 2 replicas) and pool `other` (allow-list with its own
list, so the gateway serves two pools on two ports). "Internet hosts" are one test server on the stack's
egress network (`sandstack-<stack>-egress`, the only network the gateway routes to besides the pools) with
one network alias per name the tests need; it logs every request with its Host header, so "refused" is
also checked as "never arrived".
"""

from __future__ import annotations

import re

import pytest

from testbed.deploy import engine_spec
from tests.engine.net.lab import log_lines, mark, peers_in
from tests.engine.net.probes import SANDBOX_PORT, answered, curl, probe, stable_host_addresses, tcp, template, udp
from tests.engine.net.stack import access_log, deployed, logged_sandbox, wait_logged_by_name
from testbed.waiting import wait_until

pytestmark = pytest.mark.docker

ALIASES = ["allowed.test", "a.wild.test", "x.y.wild.test", "wild.test", "deny.wild.test", "other.test",
           "ported.test", "blocked.test"]
LISTED = {"egress": "allow-list", "allow": ["allowed.test", "*.wild.test", "ported.test:8080"],
          "deny": ["deny.wild.test"]}


@pytest.fixture(scope="module")
def net(docker_client, debian_image, harness_sweep_orphans, tmp_path_factory):
    spec = engine_spec(debian_image, {
        "listed": template(debian_image, LISTED),
        "other": template(debian_image, {"egress": "allow-list", "allow": ["other.test"]}),
    }, {
        "listed": {"template": "listed", "hosts": ["local"], "replicas": 2},
        "other": {"template": "other", "hosts": ["local"]},
    })
    with deployed(__file__, "al", tmp_path_factory.mktemp("allow-list"), spec, docker_client, debian_image,
                  {"listed": 2, "other": 1}) as stack:
        stack.extra["web"] = stack.lab.server("web", stack.name("egress"), ["tcp:80", "tcp:8080", "tcp:9090"],
                                              aliases=ALIASES)
        stack.extra["listener"] = stack.lab.host_listener()
        yield stack


def requests_seen(web, since: int) -> list[str]:
    """Host headers of the requests the web server received after line `since`."""
    return [line.split()[3] for line in log_lines(web)[since:] if line.startswith("tcp ")]


def test_allow_list_allowed_exact_domain_and_wildcard_subdomain_answer_through_gateway(net):
    net.proves("Container.envs", "Network.internal")
    web, sandbox = net.extra["web"], net.sandbox("listed")
    since = mark(web, net.ip(web, "egress"), 80)
    for url, host in [("http://allowed.test/", "allowed.test"), ("http://a.wild.test/", "a.wild.test"),
                      ("http://x.y.wild.test/", "x.y.wild.test"), ("http://ported.test:8080/", "ported.test:8080")]:
        got = curl(sandbox, url)  # the sandbox's HTTP_PROXY points at its gateway port
        assert (got.status, got.body) == (200, f"web {host}"), (url, got)
    # They arrived from the gateway, never from the sandbox itself.
    assert peers_in(log_lines(web)[since:]) == {net.ip(net.gateway, "egress")}


def test_allow_list_refuses_unlisted_denied_apex_and_unlisted_port(net):
    net.proves("Container.envs")
    web, sandbox = net.extra["web"], net.sandbox("listed")
    since = mark(web, net.ip(web, "egress"), 80)
    refused = {
        "http://other.test/": "not on this pool's list (it is on pool 'other''s)",
        "http://blocked.test/": "not on the list",
        "http://deny.wild.test/": "a deny entry wins over the '*.wild.test' allow",
        "http://wild.test/": "'*.wild.test' means subdomains only, not the apex",
        "http://allowed.test:8080/": "an entry without a port allows 80 and 443 only",
        "http://ported.test/": "'ported.test:8080' allows port 8080 only",
        "http://allowed.test:9090/": "port not allowed",
        f"http://{net.ip(web, 'egress')}/": "an IP address that is not on the list",
    }
    for url, why in refused.items():
        got = curl(sandbox, url)
        assert got.status == 403, (url, why, got)
    assert requests_seen(web, since) == [], "a refused request reached the server"


def test_allow_list_direct_connection_bypassing_the_proxy_fails(net):
    net.proves("Network.internal", "Network.options")
    web, listener = net.extra["web"], net.extra["listener"]
    sandbox = net.sandbox("listed")
    web_ip = net.ip(web, "egress")
    since = mark(web, web_ip, 80)
    got = curl(sandbox, f"http://{web_ip}/", "--noproxy", "*", timeout=3)
    assert got.status == 0 and got.exit_code == 28, got  # no route: the connect times out
    got = curl(sandbox, "http://allowed.test/", "--noproxy", "*", timeout=3)
    assert got.status == 0, got  # no route even where the pool's resolver may answer the name
    results = probe(sandbox, {
        "tcp web": tcp(web_ip, 80), "udp web": udp(web_ip, 5353),
        "tcp gateway egress side": tcp(net.ip(net.gateway, "egress"), net.gateway_port("listed")),
        **listener.probes(stable_host_addresses() + [net.bridge_gateway("listed"), net.bridge_gateway("egress")]),
    })
    assert not answered(results), results
    assert log_lines(web)[since:] == [] and listener.peers == []


def test_allow_list_every_request_is_in_the_egress_log(net):
    net.proves("Container.mounts", "Container.logOpts")
    sandbox = net.sandbox("listed")
    since = len(access_log(net))
    assert curl(sandbox, "http://allowed.test/").status == 200
    assert curl(sandbox, "http://blocked.test/").status == 403
    lines = wait_until(lambda: access_log(net)[since:] if len(access_log(net)) >= since + 2 else None, 10,
                       what="two access-log lines")
    pattern = (r"host=local pool=listed sandbox={name} client={ip} method=GET dest={dest}:80 "
               r"verdict={verdict} status={status} ")
    expected = [("allowed.test", "TCP_MISS", 200), ("blocked.test", "TCP_DENIED", 403)]
    for line, (dest, verdict, status) in zip(lines, expected, strict=True):
        assert re.search(pattern.format(name=logged_sandbox(sandbox.name, net.ip(sandbox)),
                                        ip=re.escape(net.ip(sandbox)), dest=re.escape(dest), verdict=verdict,
                                        status=status), line), line
    wait_logged_by_name(net, sandbox, "http://allowed.test/")
    # The same lines reach `docker logs` of the gateway.
    wait_until(lambda: all(line in net.gateway.logs().decode() for line in lines), 10, what="docker logs lines")


def test_allow_list_sandbox_cannot_use_another_pools_gateway_port(net):
    net.proves("Network.options")
    listed, other = net.sandbox("listed"), net.sandbox("other")
    other_port = net.gateway_port("other")
    # Control: pool `other` gets other.test through its own port (and that is logged).
    prior = len(access_log(net))
    assert curl(other, "http://other.test/").status == 200
    since = wait_until(lambda: len(access_log(net)) if len(access_log(net)) > prior else None, 10,
                       what="the control's access-log line")
    for proxy in (f"http://sandstack-gateway:{other_port}", f"http://{net.ip(net.gateway, 'other')}:{other_port}"):
        got = curl(listed, "http://other.test/", "-x", proxy, timeout=3)
        assert got.status == 0, (proxy, got)
    assert access_log(net)[since:] == [], "the gateway received a request on another pool's port"


def test_gateway_refuses_requests_to_gateway_ports(net):
    net.proves("Container.envs")
    sandbox = net.sandbox("listed")
    since = len(access_log(net))
    own, other = net.gateway_port("listed"), net.gateway_port("other")
    urls = [f"http://sandstack-gateway:{own}/", f"http://sandstack-gateway:{other}/",
            f"http://{net.ip(net.gateway, 'listed')}:{own}/", f"http://{net.ip(net.gateway, 'other')}:{other}/"]
    for url in urls:
        assert curl(sandbox, url).status == 403, url
    # The gateway's own loopback too (NO_PROXY keeps these local unless the proxy is forced).
    proxy = f"http://sandstack-gateway:{own}"
    for url in [f"http://127.0.0.1:{own}/", f"http://localhost:{other}/"]:
        assert curl(sandbox, url, "-x", proxy, "--noproxy", "").status == 403, url
    lines = wait_until(lambda: access_log(net)[since:] if len(access_log(net)) >= since + len(urls) + 2 else None,
                       10, what="the refusals in the access log")
    assert len(lines) == len(urls) + 2 and all("verdict=TCP_DENIED status=403" in line for line in lines), lines


def test_allow_list_sandboxes_of_one_pool_cannot_reach_each_other(net):
    """Also on the pool's gateway port, the one port the host guard opens on the pool's bridge."""
    net.proves("Network.options")
    first, second = net.sandbox("listed", 0), net.sandbox("listed", 1)
    port = net.gateway_port("listed")
    # The second sandbox also listens on the gateway port number (any sandbox may bind any port).
    second.exec_run(["python3", "-c", "import socket,sys\n" + SERVE_ONCE, str(port)], detach=True)
    wait_until(lambda: probe(second, {"self": tcp("127.0.0.1", port)})["self"].startswith("connected"), 10,
               what="listener on the gateway port in the second sandbox")
    results = probe(first, {"tcp gateway port": tcp(net.ip(second), port),
                            "tcp server": tcp(net.ip(second), SANDBOX_PORT)})
    assert not answered(results), results


SERVE_ONCE = """
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(8); s.settimeout(30)
try:
    while True:
        c, _ = s.accept(); c.sendall(b"second sandbox\\n"); c.close()
except OSError:
    pass
"""
