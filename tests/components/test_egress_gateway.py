"""The egress gateway's container: its start-up preparation (run here in a plain shell, no Docker), its
file-descriptor budget and its route out. The rendered squid.conf is tests/components/test_squid_config.py."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from sandstack.plan.gateway import ENTRYPOINT, ERROR_PAGE, PREPARE, SQUID_TEMPLATES
from sandstack.plan.squid import ERROR_DIRECTORY, SELF_ADDRESSES
from tests.components.helpers import env_map
from testbed.specs import spec

LISTED = {"base_image": "busybox:1.36", "network": {"egress": "allow-list", "allow": ["example.com"]}}


@pytest.fixture
def gateway(build):
    return build(spec({"listed": LISTED})).container("sandstack-local-gateway-container")


def test_the_entrypoint_prepares_addresses_and_error_pages_then_runs_squid_in_the_foreground():
    assert ENTRYPOINT == (
        'printf "%s\\n" "$SANDSTACK_SQUID_CONF" > /tmp/squid.conf'
        " && hostname -I | tr -s ' ' '\\n' > /tmp/sandstack-self && grep -q . /tmp/sandstack-self"
        " && mkdir -p /tmp/sandstack-errors"
        " && for t in /usr/share/squid/errors/templates/ERR_*;"
        " do printf '%s\\n' 'The sandstack gateway refused this request or could not complete it: %c'"
        " > /tmp/sandstack-errors/${t##*/} || exit 1; done"
        " && test -s /tmp/sandstack-errors/ERR_ACCESS_DENIED"
        " && { [ ! -e /usr/share/squid/errors/templates/error-details.txt ]"
        " || cp /usr/share/squid/errors/templates/error-details.txt /tmp/sandstack-errors/; }"
        " && touch /var/log/squid/access.log && { tail -n 0 -F /var/log/squid/access.log & }"
        " && exec squid -N -f /tmp/squid.conf"
    )


def test_the_error_page_names_only_the_error_code():
    # Squid's %-codes: %a/%i the client, %h/%s/%S the gateway and squid's version, %U/%R the request.
    assert re.findall(r"%.", ERROR_PAGE) == ["%c"]


def _prepare(tmp_path: Path, templates: list[str], addresses: str) -> tuple[subprocess.CompletedProcess, Path]:
    """Runs PREPARE in a plain shell with its paths moved under tmp_path and `hostname` a stub that prints
    `addresses` (what `hostname -I` prints: addresses and a trailing space)."""
    root = tmp_path / "root"
    (root / "templates").mkdir(parents=True)
    for name in templates:
        (root / "templates" / name).write_text("<html>stock page naming %i, %h and %s</html>\n")
    (root / "bin").mkdir()
    stub = root / "bin" / "hostname"
    stub.write_text(f"#!/bin/sh\n[ \"$1\" = -I ] && printf '%s\\n' '{addresses}'\n")
    stub.chmod(0o755)
    script = (PREPARE.replace(SQUID_TEMPLATES, str(root / "templates"))
              .replace(SELF_ADDRESSES, str(root / "self")).replace(ERROR_DIRECTORY, str(root / "errors"))
              .replace("/tmp/squid.conf", str(root / "squid.conf")))
    env = {"PATH": f"{root / 'bin'}:{os.environ['PATH']}", "SANDSTACK_SQUID_CONF": "http_port 3128\nvia off"}
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=30), root


def test_preparation_writes_the_config_the_addresses_one_a_line_and_one_page_per_template(tmp_path):
    result, root = _prepare(tmp_path, ["ERR_ACCESS_DENIED", "ERR_DNS_FAIL", "error-details.txt", "generic"],
                            "172.18.0.3 10.213.1.254 fd00::3 ")
    assert result.returncode == 0, result.stderr
    assert (root / "squid.conf").read_text() == "http_port 3128\nvia off\n"
    assert (root / "self").read_text() == "172.18.0.3\n10.213.1.254\nfd00::3\n"
    # One page per ERR_ template; the TLS error descriptions copied; squid's translation source left out.
    assert sorted(p.name for p in (root / "errors").iterdir()) == ["ERR_ACCESS_DENIED", "ERR_DNS_FAIL",
                                                                    "error-details.txt"]
    for name in ("ERR_ACCESS_DENIED", "ERR_DNS_FAIL"):
        assert (root / "errors" / name).read_text() == ERROR_PAGE + "\n"


@pytest.mark.parametrize("templates, addresses, why", [
    (["ERR_ACCESS_DENIED", "error-details.txt"], "", "no address of its own: `sandstack_self` would match nothing"),
    ([], "172.18.0.3 ", "no templates found: squid would fall back to its own pages"),
])
def test_preparation_fails_rather_than_start_squid_with_a_refusal_undone(tmp_path, templates, addresses, why):
    result, _ = _prepare(tmp_path, templates, addresses)
    assert result.returncode != 0, why


def test_preparation_without_tls_error_descriptions_still_succeeds(tmp_path):
    # squid-openssl only logs an error without them; they serve TLS error details, no refusal.
    result, root = _prepare(tmp_path, ["ERR_ACCESS_DENIED"], "172.18.0.3 ")
    assert result.returncode == 0, result.stderr
    assert [p.name for p in (root / "errors").iterdir()] == ["ERR_ACCESS_DENIED"]


def test_squid_is_told_its_file_descriptor_budget_and_the_container_keeps_the_daemons_limit(gateway):
    assert "\nmax_filedescriptors 16384\n" in env_map(gateway)["SANDSTACK_SQUID_CONF"]
    # A nofile ulimit above the daemon's own fails the container's start; squid takes the lower of the two.
    assert "ulimits" not in gateway.inputs


def test_the_egress_network_is_the_gateways_default_route(build):
    built = build(spec({"listed": LISTED}))
    networks = built.container("sandstack-local-gateway-container").inputs["networksAdvanced"]
    assert networks[0] == {"name": built.reg("sandstack-local-egress-net").inputs["name"], "gwPriority": 1000}
    assert [n.get("gwPriority") for n in networks[1:]] == [None]  # the pool's network: no route out


def test_the_gateway_runs_the_entrypoint(gateway):
    assert gateway.inputs["command"] == ["sh", "-c", ENTRYPOINT]
