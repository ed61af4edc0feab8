"""The egress gateway's container: its start-up preparation (run here in a plain shell, no Docker), its
file-descriptor budget and its route out. The rendered squid.conf is tests/components/test_squid_config.py."""

from __future__ import annotations

import ipaddress
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from sandstack.plan.gateway import (CACHE_LOG, ENTRYPOINT, ERROR_PAGE, FRONT_LOG, LOOP, PREPARE, SQUID_TEMPLATES,
                                    WRITE_HELPER)
from sandstack.plan.reload import SERVICE_SH, ConfigSet
from sandstack.plan.squid import ACCESS_LOG, ERROR_DIRECTORY, SELF_ADDRESSES
from tests.assets.fakes import RELOAD
from tests.components.helpers import env_map
from testbed.specs import spec

LISTED = {"base_image": "busybox:1.36", "network": {"egress": "allow-list", "allow": ["example.com"]}}


@pytest.fixture
def gateway(build):
    return build(spec({"listed": LISTED})).container("sandstack-local-gateway-container")


def test_the_entrypoint_prepares_the_error_pages_then_takes_each_configuration_in_place():
    # The network profiles' helper is written before squid starts (its external acl runs it: test_squid_profiles).
    assert ENTRYPOINT == SERVICE_SH + PREPARE + " || exit 1\n" + WRITE_HELPER + LOOP
    assert PREPARE == (
        "mkdir -p /tmp/sandstack-errors"
        " && for t in /usr/share/squid/errors/templates/ERR_*;"
        " do printf '%s\\n' 'The sandstack gateway refused this request or could not complete it: %c'"
        " > /tmp/sandstack-errors/${t##*/} || exit 1; done"
        " && test -s /tmp/sandstack-errors/ERR_ACCESS_DENIED"
        # The answer to a setup step asking what was refused it: the refusals helper's message only.
        " && printf '%s\\n' 'sandstack-refused: %o' > /tmp/sandstack-errors/ERR_SANDSTACK_REFUSALS"
        " && { [ ! -e /usr/share/squid/errors/templates/error-details.txt ]"
        " || cp /usr/share/squid/errors/templates/error-details.txt /tmp/sandstack-errors/; }"
    )


def test_the_error_page_names_only_the_error_code():
    # Squid's %-codes: %a/%i the client, %h/%s/%S the gateway and squid's version, %U/%R the request.
    assert re.findall(r"%.", ERROR_PAGE) == ["%c"]


def _prepare(tmp_path: Path, templates: list[str]) -> tuple[subprocess.CompletedProcess, Path]:
    """Runs PREPARE in a plain shell with its paths moved under tmp_path."""
    root = tmp_path / "root"
    (root / "templates").mkdir(parents=True)
    for name in templates:
        (root / "templates" / name).write_text("<html>stock page naming %i, %h and %s</html>\n")
    script = PREPARE.replace(SQUID_TEMPLATES, str(root / "templates")).replace(ERROR_DIRECTORY, str(root / "errors"))
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30), root


def test_preparation_writes_one_page_per_template(tmp_path):
    result, root = _prepare(tmp_path, ["ERR_ACCESS_DENIED", "ERR_DNS_FAIL", "error-details.txt", "generic"])
    assert result.returncode == 0, result.stderr
    # One page per ERR_ template; the TLS error descriptions copied; squid's translation source left out.
    assert sorted(p.name for p in (root / "errors").iterdir()) == ["ERR_ACCESS_DENIED", "ERR_DNS_FAIL",
                                                                    "ERR_SANDSTACK_REFUSALS", "error-details.txt"]
    for name in ("ERR_ACCESS_DENIED", "ERR_DNS_FAIL"):
        assert (root / "errors" / name).read_text() == ERROR_PAGE + "\n"
    assert (root / "errors" / "ERR_SANDSTACK_REFUSALS").read_text() == "sandstack-refused: %o\n"


def test_preparation_fails_rather_than_start_squid_with_its_own_pages(tmp_path):
    result, _ = _prepare(tmp_path, [])  # no templates found: squid would fall back to its own pages
    assert result.returncode != 0


def test_preparation_without_tls_error_descriptions_still_succeeds(tmp_path):
    # squid-openssl only logs an error without them; they serve TLS error details, no refusal.
    result, root = _prepare(tmp_path, ["ERR_ACCESS_DENIED"])
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (root / "errors").iterdir()) == ["ERR_ACCESS_DENIED", "ERR_SANDSTACK_REFUSALS"]


# --- taking a configuration in place: the entrypoint's loop, with squid, HAProxy and hostname stubs ------------

# squid: `-k parse` refuses a configuration holding `bogus_directive` as squid does; `-N` logs one "Accepting" line
# per http_port (and again on each SIGHUP, re-reading its file), and records each start and reconfigure with the file
# it read.
SQUID_STUB = r"""#!/bin/sh
log=@ROOT@/events.log
if [ "$1" = -k ] && [ "$2" = parse ]; then
  grep -q bogus_directive "$4" && { echo "FATAL: Bungled $4 line 2: bogus_directive on" >&2; exit 1; }
  exit 0
fi
accept() { grep '^http_port ' "$3" | while read -r _ port _; do
  echo "Accepting HTTP Socket connections at conn1 local=[::]:$port" >>@CACHE_LOG@; done; }
echo "squid start $* ($(head -n 1 "$3"))" >>"$log"
trap 'echo "squid reconfigure ($(head -n 1 "$3"))" >>"$log"; accept "$@"' HUP
accept "$@"
while :; do sleep 0.05; done
"""
# HAProxy: `-c` refuses a file holding `bogus_keyword` as HAProxy does; `-W` (master-worker) says "Loading success."
# on stderr at start and at each SIGUSR2, re-reading its file — "Loading failure!" with an alert for a file holding
# `port_in_use`, as a bind that fails at the reload does; records each start and reload with the file it read.
FRONT_STUB = r"""#!/bin/sh
log=@ROOT@/events.log
if [ "$1" = -c ]; then
  grep -q bogus_keyword "$3" && { echo "[ALERT]    (1) : config : parsing [$3:2] : unknown keyword 'bogus_keyword'." >&2; exit 1; }
  echo "Configuration file is valid"; exit 0
fi
load() {
  if grep -q port_in_use "$3"; then
    echo "[ALERT]    (9) : Starting proxy p: cannot bind socket (Address already in use) [0.0.0.0:30001]" >&2
    echo "[NOTICE]   (9) : Loading failure!" >&2
  else echo "[NOTICE]   (9) : Loading success." >&2; fi
}
echo "haproxy start $* ($(head -n 1 "$3"))" >>"$log"
trap 'echo "haproxy reload ($(head -n 1 "$3"))" >>"$log"; load "$@"' USR2
load "$@"
while :; do sleep 0.05; done
"""


class Gateway:
    """The gateway's entrypoint running in a plain shell, its paths under one folder, given sets as its reload
    container gives them."""

    def __init__(self, root: Path, addresses: str = "172.18.0.3 10.213.1.254 "):
        self.root, self.config = root, root / "config"
        (root / "bin").mkdir(parents=True)
        (root / "log").mkdir()
        self.config.mkdir()
        self.stub("squid", SQUID_STUB.replace("@ROOT@", str(root)).replace("@CACHE_LOG@", str(root / "log/cache.log")))
        self.stub("haproxy", FRONT_STUB.replace("@ROOT@", str(root)))
        self.stub("hostname", f"#!/bin/sh\n[ \"$1\" = -I ] && printf '%s\\n' '{addresses}'\n")
        script = (ENTRYPOINT.replace(SQUID_TEMPLATES, str(root / "templates"))
                  .replace(ERROR_DIRECTORY, str(root / "errors")).replace(SELF_ADDRESSES, str(root / "self"))
                  .replace("/tmp/squid.conf", str(root / "squid.conf")).replace(ACCESS_LOG, str(root / "log/access.log"))
                  .replace(CACHE_LOG, str(root / "log/cache.log")).replace(FRONT_LOG, str(root / "log/haproxy.log"))
                  .replace("/tmp/haproxy.cfg", str(root / "haproxy.cfg")))
        (root / "templates").mkdir()
        (root / "templates" / "ERR_ACCESS_DENIED").write_text("stock\n")
        env = {"PATH": f"{root / 'bin'}:{os.environ['PATH']}", "SANDSTACK_CONFIG_DIR": str(self.config)}
        self.process = subprocess.Popen(["sh", "-c", script], env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True, start_new_session=True)

    def stub(self, name: str, text: str) -> None:
        (self.root / "bin" / name).write_text(text)
        (self.root / "bin" / name).chmod(0o755)

    def give(self, conf: str, front: str = None) -> str:
        config = ConfigSet("gateway", (("SQUID_CONF", conf), ("FRONT_CONF", FRONT_A if front is None else front)))
        RELOAD.deliver(str(self.config), config.digest, dict(config.items))
        RELOAD.point_want(str(self.config), config.digest)
        return config.digest

    def status(self, name: str) -> str:
        return RELOAD.read_status(str(self.config), name)

    def wait(self, predicate, what: str) -> None:
        deadline = time.monotonic() + 20
        while not predicate():
            assert self.process.poll() is None and time.monotonic() < deadline, (what, self.events())
            time.sleep(0.02)

    def events(self) -> list[str]:
        """What squid and HAProxy were told, in order, with the first line of the file each read then."""
        path = self.root / "events.log"
        return path.read_text().splitlines() if path.exists() else []

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


@pytest.fixture
def running(tmp_path):
    gateway = Gateway(tmp_path / "gw")
    yield gateway
    gateway.stop()


CONF_A = "# squid a\nhttp_port 127.0.0.1:53128 name=a require-proxy-header\nvia off\n"
CONF_A2 = "# squid a, another allow entry\nhttp_port 127.0.0.1:53128 name=a require-proxy-header\nvia off\n"
CONF_AB = ("# squid a b\nhttp_port 127.0.0.1:53128 name=a require-proxy-header\n"
           "http_port 127.0.0.1:53129 name=b require-proxy-header\nvia off\n")
FRONT_A = "# front a\nlisten a\n  bind 0.0.0.0:33128\n"
FRONT_AB = "# front a b\nlisten a\n  bind 0.0.0.0:33128\nlisten b\n  bind 0.0.0.0:33129\n"


def test_squid_then_haproxy_start_with_the_first_configuration_reported_once_both_listen(running):
    time.sleep(0.3)
    assert running.events() == []  # no configuration yet: neither runs
    first = running.give(CONF_A)
    running.wait(lambda: running.status("have") == first, "the first configuration in force")
    assert (running.root / "squid.conf").read_text() == CONF_A
    assert (running.root / "haproxy.cfg").read_text() == FRONT_A
    assert (running.root / "self").read_text() == "172.18.0.3\n10.213.1.254\n"
    assert running.events() == [f"squid start -N -f {running.root / 'squid.conf'} (# squid a)",
                                f"haproxy start -W -f {running.root / 'haproxy.cfg'} (# front a)"]


def test_a_new_allow_entry_reconfigures_squid_and_leaves_haproxy_alone(running):
    first = running.give(CONF_A)
    running.wait(lambda: running.status("have") == first, "the first configuration in force")
    second = running.give(CONF_A2)  # the same ports: HAProxy's file is the same
    running.wait(lambda: running.status("have") == second, "the second configuration in force")
    assert (running.root / "squid.conf").read_text() == CONF_A2
    assert running.events()[2:] == ["squid reconfigure (# squid a, another allow entry)"]


def test_a_new_pool_reconfigures_squid_first_then_reloads_haproxy_in_place(running):
    first = running.give(CONF_A)
    running.wait(lambda: running.status("have") == first, "the first configuration in force")
    second = running.give(CONF_AB, FRONT_AB)
    running.wait(lambda: running.status("have") == second, "the second configuration in force")
    # Squid listens on the new pool's loopback port before HAProxy opens the pool's port in front of it.
    assert running.events()[2:] == ["squid reconfigure (# squid a b)", "haproxy reload (# front a b)"]
    assert (running.root / "haproxy.cfg").read_text() == FRONT_AB


def test_a_configuration_squid_refuses_is_reported_and_the_one_in_force_stays(running):
    first = running.give(CONF_A)
    running.wait(lambda: running.status("have") == first, "the first configuration in force")
    bad = running.give("http_port 3128 name=a\nbogus_directive on\n", FRONT_AB)
    running.wait(lambda: running.status("refused").startswith(bad), "the refusal")
    assert running.status("refused") == \
        f"{bad} FATAL: Bungled {running.root / 'squid.conf.new'} line 2: bogus_directive on"
    assert running.status("have") == first
    assert (running.root / "squid.conf").read_text() == CONF_A
    assert (running.root / "haproxy.cfg").read_text() == FRONT_A
    assert len(running.events()) == 2  # neither told anything


def test_a_configuration_haproxy_refuses_is_reported_before_squid_is_told(running):
    first = running.give(CONF_A)
    running.wait(lambda: running.status("have") == first, "the first configuration in force")
    bad = running.give(CONF_AB, "listen b\n  bogus_keyword\n")
    running.wait(lambda: running.status("refused").startswith(bad), "the refusal")
    assert running.status("refused") == (f"{bad} haproxy: [ALERT]    (1) : config : parsing "
                                         f"[{running.root / 'haproxy.cfg.new'}:2] : unknown keyword 'bogus_keyword'.")
    assert running.status("have") == first
    assert (running.root / "squid.conf").read_text() == CONF_A
    assert len(running.events()) == 2


def test_a_reload_haproxy_fails_puts_squids_previous_file_back_and_is_refused(running):
    first = running.give(CONF_A)
    running.wait(lambda: running.status("have") == first, "the first configuration in force")
    bad = running.give(CONF_AB, "# front port_in_use\nlisten b\n  bind 0.0.0.0:33129\n")
    running.wait(lambda: running.status("refused").startswith(bad), "the refusal")
    assert running.status("refused") == (f"{bad} haproxy did not load its configuration: [ALERT]    (9) : Starting "
                                         "proxy p: cannot bind socket (Address already in use) [0.0.0.0:30001]")
    assert running.status("have") == first
    # Squid had taken the new file; it is given the one in force back, and HAProxy's file is the one in force again
    # (its old worker kept serving: a failed reload of HAProxy's master ends no worker).
    assert running.events()[2:] == ["squid reconfigure (# squid a b)", "haproxy reload (# front port_in_use)",
                                    "squid reconfigure (# squid a)"]
    assert (running.root / "squid.conf").read_text() == CONF_A
    assert (running.root / "haproxy.cfg").read_text() == FRONT_A


def test_a_gateway_without_an_address_of_its_own_refuses_rather_than_undo_the_self_refusal(tmp_path):
    gateway = Gateway(tmp_path / "gw", addresses="")
    try:
        digest = gateway.give(CONF_A)
        gateway.wait(lambda: gateway.status("refused").startswith(digest), "the refusal")
        assert gateway.status("refused") == f"{digest} the gateway has no address"
        assert gateway.events() == []
    finally:
        gateway.stop()


def test_squid_is_told_its_file_descriptor_budget_and_the_container_keeps_the_daemons_limit(build):
    built = build(spec({"listed": LISTED}))
    gateway = built.container("sandstack-local-gateway-container")
    assert "\nmax_filedescriptors 16384\n" in env_map(built.container("sandstack-local-gateway-reload"))["SQUID_CONF"]
    # A nofile ulimit above the daemon's own fails the container's start; squid takes the lower of the two.
    assert "ulimits" not in gateway.inputs


def test_the_egress_network_is_the_gateways_default_route_and_its_reload_joins_it_to_the_pools(build):
    built = build(spec({"listed": LISTED}))
    networks = built.container("sandstack-local-gateway-container").inputs["networksAdvanced"]
    assert networks == [{"name": built.reg("sandstack-local-egress-net").inputs["name"], "gwPriority": 1000}]
    # The pool's network (no route out) is joined at the address the guard opens, with the proxy's alias, by the
    # reload container, which leaves every other pool network of the stack on this host.
    reload = env_map(built.container("sandstack-local-gateway-reload"))
    pool_net = built.reg("sandstack-local-net.listed").inputs
    address = ipaddress.ip_network(pool_net["ipamConfigs"][0]["subnet"])[-2]  # its last usable address
    assert reload["SANDSTACK_CONFIG_JOIN"] == f"{pool_net['name']} {address} sandstack-gateway"
    assert reload["SANDSTACK_CONFIG_LEAVE"] == "sandstack.stack=t sandstack.host=local sandstack.pool"


def test_the_gateway_runs_the_entrypoint(gateway):
    assert gateway.inputs["command"] == ["sh", "-c", ENTRYPOINT]
