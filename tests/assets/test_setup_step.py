"""A setup step's wrapper (components/assets/setup_step.sh, as sandstack.plan.snapshot.SETUP_STEP renders it) and the
gateway's refusals helper (sandstack.plan.gateway.REFUSALS_HELPER_SH), in a plain shell with stubs: where the step's
lookups go, its exit status kept, and the located line naming what the gateway refused it. Both on the engine:
tests/engine/test_setup_policy.py."""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from pathlib import Path

from sandstack.plan.gateway import NAME_HELPER_SH, REFUSALS_HELPER_SH
from sandstack.plan.network import PoolNetwork
from sandstack.plan.snapshot import SETUP_STEP
from sandstack.plan.squid import ACCESS_LOG

RESOLV, HOSTS, ROUTE = "/etc/resolv.conf", "/etc/hosts", "/proc/net/route"
# A build container's routes on a pool network 10.213.0.0/23, as the kernel lists them (little-endian hex): a routed
# network has a default route too, an internal one only its own.
ROUTES = ("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
          "eth0\t00000000\t0100D50A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
          "eth0\t0000D50A\t00000000\t0001\t0\t0\t0\t00FEFFFF\t0\t0\t0\n")


def _bin(tmp_path: Path, tools: dict[str, str]) -> Path:
    """A PATH of its own: `sh`, `date`, `cat`, and each stub (name → its shell body)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("sh", "date", "cat"):
        os.symlink(shutil.which(name), folder / name)
    for name, body in tools.items():
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)
    return folder


def _step(tmp_path: Path, step: str, env: dict[str, str], tools: dict[str, str] | None = None,
          routes: str = ROUTES):
    files = {RESOLV: "nameserver 127.0.0.11\n", HOSTS: "127.0.0.1\tlocalhost\n", ROUTE: routes}
    script = SETUP_STEP
    # The container's files, moved under tmp_path: this host's own are never touched.
    for path, text in files.items():
        (tmp_path / Path(path).name).write_text(text)
        script = script.replace(path, str(tmp_path / Path(path).name))
    (tmp_path / "setup-step").write_text(script)
    path = _bin(tmp_path, tools or {})
    result = subprocess.run(["/bin/sh", str(tmp_path / "setup-step"), "agent", "1", step], capture_output=True,
                            text=True, env={"PATH": str(path), **env}, timeout=30)
    return result, (tmp_path / "resolv.conf").read_text(), (tmp_path / "hosts").read_text()


PROXY = {"http_proxy": "http://sandstack-gateway:32312"}
# A curl that records what it was asked and answers as the gateway's refusals page would.
CURL = "echo \"$*\" >> {log}; echo '{answer}'"


def test_the_steps_lookups_go_to_the_pools_resolver_and_the_gateways_alias_to_its_address(tmp_path):
    network = PoolNetwork("agent", "n", "b", True, "gateway", 30000, ipaddress.ip_network("10.213.0.0/23"))
    result, resolv, hosts = _step(tmp_path, "exit 0", {"SANDSTACK_SETUP_RESOLVER": "bridge", **PROXY})
    assert (result.returncode, result.stderr) == (0, "")
    # The addresses sandstack gives the pool network's bridge and gateway, found from the route alone.
    assert (network.bridge_ip, network.gateway_ip) == ("10.213.0.1", "10.213.1.254")
    assert resolv == f"nameserver {network.bridge_ip}\n"
    assert hosts == f"127.0.0.1\tlocalhost\n{network.gateway_ip} sandstack-gateway\n"


def test_a_logged_direct_route_gets_the_resolver_and_no_alias(tmp_path):
    result, resolv, hosts = _step(tmp_path, "exit 0", {"SANDSTACK_SETUP_RESOLVER": "bridge"})
    assert (result.returncode, resolv, hosts) == (0, "nameserver 10.213.0.1\n", "127.0.0.1\tlocalhost\n")


def test_without_a_route_the_step_does_not_run(tmp_path):
    result, resolv, _ = _step(tmp_path, "echo ran", {"SANDSTACK_SETUP_RESOLVER": "bridge"}, routes=ROUTES[:100])
    assert (result.returncode, result.stdout, resolv) == (1, "", "nameserver 127.0.0.11\n")  # fail closed
    assert result.stderr == ("$.templates.agent.snapshot.setup[1]: the build container has no route to find the "
                             "pool's resolver by\n")


def test_without_a_resolver_the_containers_own_files_stay_and_the_status_is_kept(tmp_path):
    result, resolv, hosts = _step(tmp_path, "exit 0", {})
    assert (result.returncode, resolv, hosts) == (0, "nameserver 127.0.0.11\n", "127.0.0.1\tlocalhost\n")


def test_a_failed_step_names_what_the_gateway_refused_it_located(tmp_path):
    asked = tmp_path / "asked"
    curl = CURL.format(log=asked, answer="sandstack-refused: refused.test:80 pkgs.other.test:443")
    result, _, _ = _step(tmp_path, "echo quiet; exit 3", PROXY, {"curl": curl})
    assert result.returncode == 3  # the step's own status: the build fails as before
    assert result.stdout == "quiet\n"
    assert result.stderr == ("$.templates.agent.snapshot.setup[1]: failed (exit 3); the pool's gateway refused: "
                             "refused.test:80 pkgs.other.test:443 (not in the template's setup policy)\n")
    # Asked through the proxy (curl reads http_proxy) for the refusals since the step started, to the second.
    [line] = asked.read_text().splitlines()
    assert line.startswith("-s --max-time 10 http://refusals.sandstack.invalid/20"), line
    assert len(line.rsplit("/", 1)[1]) == len("2026-12-06T10:41:06")


def test_a_failed_step_the_gateway_refused_nothing_says_nothing_more(tmp_path):
    # Nothing refused; a gateway whose helper gave no message; a page that is not the gateway's answer.
    for i, answer in enumerate(("sandstack-refused: -", "sandstack-refused: [not available]", "<html>x</html>")):
        (tmp_path / str(i)).mkdir()
        result, _, _ = _step(tmp_path / str(i), "exit 1", PROXY, {"curl": CURL.format(log="/dev/null", answer=answer)})
        assert (result.returncode, result.stderr) == (1, ""), answer


def test_a_step_that_succeeds_or_has_no_gateway_asks_nothing(tmp_path):
    asked = tmp_path / "asked"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ok, _, _ = _step(tmp_path / "a", "exit 0", PROXY, {"curl": CURL.format(log=asked, answer="x")})
    direct, _, _ = _step(tmp_path / "b", "exit 5", {}, {"curl": CURL.format(log=asked, answer="x")})
    assert (ok.returncode, direct.returncode, direct.stderr) == (0, 5, "")
    assert not asked.exists()


def test_an_image_without_a_client_points_at_the_gateways_log(tmp_path):
    result, _, _ = _step(tmp_path, "exit 2", PROXY)
    assert result.returncode == 2
    assert result.stderr == ("$.templates.agent.snapshot.setup[1]: failed (exit 2); the pool gateway's access log has "
                             "what it refused (no curl, wget or python3 in the image to ask it)\n")


# --- the gateway's refusals helper -----------------------------------------------------------------------------

NAMES = {"10.213.240.7": "7d29db5b853c", "10.213.240.9": "sandstack-t-fetch-0"}
LOG = [
    # Refused before the step started: not this step's.
    "2026-12-06T10:40:59.900Z host=h pool=fetch sandbox=setup:fetch:7d29db5b853c client=10.213.240.7 method=GET "
    "dest=early.test:80 verdict=TCP_DENIED status=403 bytes=0",
    "2026-12-06T10:41:06.120Z host=h pool=fetch sandbox=setup:fetch:7d29db5b853c client=10.213.240.7 method=GET "
    "dest=allowed.test:80 verdict=TCP_MISS status=200 bytes=15",
    "2026-12-06T10:41:06.130Z host=h pool=fetch sandbox=setup:fetch:7d29db5b853c client=10.213.240.7 method=GET "
    "dest=refused.test:80 verdict=TCP_DENIED status=403 bytes=0",
    "2026-12-06T10:41:07.000Z host=h pool=fetch sandbox=setup:fetch:7d29db5b853c client=10.213.240.7 method=CONNECT "
    "dest=pkgs.other.test:443 verdict=TCP_DENIED status=403 bytes=0",
    "2026-12-06T10:41:07.100Z host=h pool=fetch sandbox=setup:fetch:7d29db5b853c client=10.213.240.7 method=GET "
    "dest=refused.test:80 verdict=TCP_DENIED status=403 bytes=0",
    # The build's previous RUN container at the same address, before the step: not this step's.
    "2026-12-06T10:41:05.000Z host=h pool=fetch sandbox=setup:fetch:old_build client=10.213.240.7 method=GET "
    "dest=other.test:80 verdict=TCP_DENIED status=403 bytes=0",
    # A sandbox that had the address: never a build's answer.
    "2026-12-06T10:41:08.000Z host=h pool=fetch sandbox=sandstack-t-fetch-1 client=10.213.240.7 method=GET "
    "dest=sandbox.test:80 verdict=TCP_DENIED status=403 bytes=0",
    # Logged under the predecessor's name (the name helper's 5 s cache): still this step's, by its time.
    "2026-12-06T10:41:08.500Z host=h pool=fetch sandbox=setup:fetch:old_build client=10.213.240.7 method=GET "
    "dest=cached.test:80 verdict=TCP_DENIED status=403 bytes=0",
    # Its own question, logged as squid answered it.
    "2026-12-06T10:41:09.000Z host=h pool=fetch sandbox=setup:fetch:7d29db5b853c client=10.213.240.7 method=GET "
    "dest=refusals.sandstack.invalid:80 verdict=TCP_DENIED status=403 bytes=0",
    "2026-12-06T10:41:09.500Z host=h pool=fetch sandbox=sandstack-t-fetch-0 client=10.213.240.9 method=GET "
    "dest=secret.test:80 verdict=TCP_DENIED status=403 bytes=0",
]


def _helper(tmp_path: Path, questions: list[str], script: str = REFUSALS_HELPER_SH) -> list[str]:
    log = tmp_path / "access.log"
    log.write_text("\n".join(LOG) + "\n")
    # getent as Docker's resolver answers the gateway: `<address> <name>.<network>`, nothing for an unknown one.
    cases = "".join(f'  {address}) echo "{address}       {name}.sandstack-t-fetch" ;;\n'
                    for address, name in NAMES.items())
    path = _bin(tmp_path, {"getent": f'case "$2" in\n{cases}  *) exit 2 ;;\nesac'})
    for tool in ("tail", "awk"):
        os.symlink(shutil.which(tool), path / tool)
    result = subprocess.run(["/bin/sh", "-c", script.replace(ACCESS_LOG, str(log))],
                            input="".join(q + "\n" for q in questions), capture_output=True, text=True,
                            env={"PATH": str(path)}, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_the_helper_names_what_it_refused_this_container_since_the_step_started(tmp_path):
    assert _helper(tmp_path, ["10.213.240.7 /2026-12-06T10:41:06", "10.213.240.7 /2026-12-06T10:41:10",
                              "10.213.240.7 %2F2026-12-06T10%3A41%3A07"]) == [
        'OK message="refused.test:80 pkgs.other.test:443 cached.test:80"',  # each once, in the order refused
        'OK message="-"',  # nothing since
        'OK message="pkgs.other.test:443 refused.test:80 cached.test:80"',  # the path as squid quotes it
    ]


def test_the_helper_tells_a_sandbox_or_an_unnamed_address_or_a_bad_time_nothing(tmp_path):
    assert _helper(tmp_path, ["10.213.240.9 /2026-12-06T10:00:00",  # a sandbox asking about its own address
                              "10.213.240.8 /2026-12-06T10:00:00",  # no name: Docker's resolver does not know it
                              "10.213.240.7 /",  # no time
                              "10.213.240.7 /0;rm%20-rf"]) == ['OK message="-"'] * 4


def test_the_name_helper_logs_a_build_as_the_setup_of_the_pools_template(tmp_path):
    # squid asks with the request's source and the pool's template (the pool's name acl's argument).
    assert _helper(tmp_path, ["10.213.240.7 fetch", "10.213.240.9 fetch", "10.213.240.8 fetch"], NAME_HELPER_SH) == [
        "OK tag=setup:fetch:7d29db5b853c",  # a container Docker named, none of sandstack's: a build's RUN container
        "OK tag=sandstack-t-fetch-0",  # a sandbox, by its name as before
        "OK tag=10.213.240.8",  # nothing answers: the address
    ]
