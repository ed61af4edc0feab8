"""A template's setup steps run under its network policy on the real engine (issue 39 item 1,
docs/design/setup-policy.md).

One stack: pool `fetch`, allow-list [allowed.test]. Its first apply has no setup step; then a test server (the stack's
"internet", on its egress network, answering `allowed.test` and `refused.test`, never an outside address) starts, and
the template gets a setup step that fetches from it: the build runs the step on the pool's network through the
gateway, the fetched body is in the image, and the gateway's access log has the build's request under pool `fetch`
from an address that is no sandbox's. Then a step fetching from `refused.test`: the gateway refuses it (403, logged
TCP_DENIED), the server never sees it, and the apply fails with the build's error naming the address. A step whose
tool says nothing of what failed (python3 swallowing the error) still fails naming it: its wrapper asks the gateway
what it refused the step's container. A step's own lookups go to the pool's logging resolver: the allowed name
resolves (through the stack's declared upstream, a DNS server of the test answering every name with 198.51.100.53),
the refused one does not, and both are in the pool's resolver log, from the build's address.
"""

from __future__ import annotations

import re
import time

import pytest

from testbed.deploy import engine_spec
from testbed.waiting import wait_until
from tests.engine.net.lab import log_lines, netns_address
from tests.engine.net.probes import template
from tests.engine.net.stack import access_log, deployed
from tests.engine.sandbox_helpers import sh

pytestmark = pytest.mark.docker

NETWORK = {"egress": "allow-list", "allow": ["allowed.test"]}


def _spec(image: str, setup: list[str] | None = None, version: str = "1") -> str:
    extra = {"snapshot": {"version": version, "setup": setup}} if setup else {}
    return engine_spec(image, {"fetch": template(image, NETWORK, **extra)}, dns_upstream=(netns_address(0),))


def _fetch(host: str, target: str) -> str:
    # curl takes http_proxy from the build's proxy arguments; -f: an HTTP error (the gateway's 403) fails the step.
    return f"curl -fsS -o {target} http://{host}/"


@pytest.fixture(scope="module")
def net(docker_client, debian_image, harness_sweep_orphans, tmp_path_factory):
    with deployed(__file__, "sp", tmp_path_factory.mktemp("setup-policy"), _spec(debian_image), docker_client,
                  debian_image, {"fetch": 1}) as stack:
        stack.extra["web"] = stack.lab.server("web", stack.name("egress"), ["tcp:80"],
                                              aliases=["allowed.test", "refused.test"])
        stack.extra["upstream"] = stack.lab.netns("upstream", 0, ["dns:53"])
        yield stack


def _requests(web) -> list[str]:
    return [line.split()[3] for line in log_lines(web) if line.startswith("tcp ")]


def test_a_setup_step_reaches_what_the_policy_allows_through_the_gateway_logged(net, debian_image):
    sandboxes_before = {net.ip(net.sandbox("fetch"))}
    since = len(access_log(net))
    started = time.monotonic()
    net.deployment.up(_spec(debian_image, [_fetch("allowed.test", "/etc/fetched")]))
    print(f"\n[setup-policy] apply with the setup step (build under policy, sandbox replaced): "
          f"{time.monotonic() - started:.1f} s")  # a figure for the docs, never asserted
    net.harness.proves("RemoteImage.build.networkMode", "RemoteImage.build.buildArgs")
    box = net.sandbox("fetch")
    code, fetched = sh(box, "cat /etc/fetched")
    assert (code, fetched.strip()) == (0, "web allowed.test")
    assert _requests(net.extra["web"]) == ["allowed.test"]
    # The build's request, judged as the pool's: its own address on the pool's network, not a sandbox's.
    [line] = [line for line in access_log(net)[since:] if "dest=allowed.test:80" in line]
    client = re.search(r" client=(\S+) ", line)[1]
    # Named as the setup of the pool's template, with Docker's name for the build's RUN container.
    assert re.search(r"host=local pool=fetch sandbox=setup:fetch:\w+ client=\S+ method=GET "
                     r"dest=allowed.test:80 verdict=TCP_MISS status=200 ", line), line
    assert client not in sandboxes_before | {net.ip(box)}
    # The proxy arguments are the build's, not the image's.
    env = box.image.attrs["Config"]["Env"] or []
    assert not [e for e in env if e.lower().startswith(("http_proxy=", "https_proxy="))], env
    history = str(box.image.history())
    assert "sandstack-gateway" not in history, history


def test_a_setup_step_the_policy_refuses_fails_the_apply_naming_the_address(net, debian_image, docker_client):
    since = len(access_log(net))
    containers = {c.id for c in docker_client.containers.list(all=True)}
    setup = [_fetch("allowed.test", "/etc/fetched"), _fetch("refused.test", "/etc/refused")]
    with pytest.raises(Exception) as failure:
        net.deployment.up(_spec(debian_image, setup, version="2"))
    message = str(failure.value)
    print(f"\n[setup-policy] the refused apply's error:\n{message[-900:]}")
    assert "refused.test" in message and "403" in message, message
    assert _requests(net.extra["web"]).count("refused.test") == 0  # never reached the server
    lines = [line for line in access_log(net)[since:] if "dest=refused.test:80" in line]
    assert len(lines) == 1 and "pool=fetch " in lines[0] and "verdict=TCP_DENIED status=403 " in lines[0], lines
    # The failed step's container is not left behind (the build's force_remove).
    left = [c.name for c in docker_client.containers.list(all=True) if c.id not in containers]
    assert left == [], left


def test_a_step_whose_tool_says_nothing_still_fails_naming_what_the_gateway_refused(net, debian_image):
    # The host is never in the step's text: the line naming it can only come from the gateway.
    quiet = ("python3 -c \"import sys, urllib.request as r; h = 'refused' + '.test'; "
             "sys.exit(0 if r.urlopen('http://%s/' % h) else 1)\" 2>/dev/null")
    with pytest.raises(Exception) as failure:
        net.deployment.up(_spec(debian_image, [_fetch("allowed.test", "/etc/fetched"), quiet], version="3"))
    message = str(failure.value)
    print(f"\n[setup-policy] the quiet step's error:\n{message[-900:]}")
    assert ("$.templates.fetch.snapshot.setup[1]: failed (exit 1); the pool's gateway refused: refused.test:80 "
            "(not in the template's setup policy)") in message, message
    assert _requests(net.extra["web"]).count("refused.test") == 0


def _resolver_log(net) -> str:
    code, out = net.client.containers.get(net.name("logger")).exec_run(["cat", "/var/log/sandstack/dns/fetch.log"])
    assert code == 0, out
    return out.decode()


def test_a_steps_own_lookups_are_answered_and_logged_by_the_pools_resolver(net, debian_image):
    upstream = net.extra["upstream"]
    since = len(upstream.lines())
    sandboxes = {net.ip(net.sandbox("fetch"))}
    step = "getent hosts allowed.test > /etc/resolved && ! getent hosts refused.test"
    net.deployment.up(_spec(debian_image, [step], version="4"))
    box = net.sandbox("fetch")
    code, resolved = sh(box, "cat /etc/resolved")
    assert (code, resolved.split()) == (0, ["198.51.100.53", "allowed.test"])
    # Only the allowed name left the resolver (the refused one was answered NXDOMAIN by it).
    assert sorted({line.split()[-1] for line in upstream.lines()[since:] if line.startswith("dns ")}) == \
        ["allowed.test"]
    log = wait_until(lambda: next((t for t in [_resolver_log(net)] if "refused.test" in t), None), 10,
                     what="the refused lookup's line")
    [build] = {m[1] for m in re.finditer(r"query\[A\] allowed\.test from (\S+)", log)}
    assert f"query[A] refused.test from {build}" in log and "config refused.test is NXDOMAIN" in log, log
    assert build not in sandboxes | {net.ip(box)}  # the build's RUN container, not a sandbox
