"""Waking a site's sandbox from the ingress, in the plan (docs/design/ondemand.md, "Waking on a URL request"): the
ingress's network gets a fixed subnet beside a runtime, the ingress mounts the runtime's configuration volume
read-only and reaches the runtime by its socket there (the runtime listens on no address of the ingress's network,
and the guard opens nothing of the host to the ingress), each site's Caddyfile asks the runtime and then retries, and
both containers get the same wake token, derived from the runtime's, which the Caddyfile only names — the runtime
whether the host has an ingress or not, so an ingress added changes none of the runtime's inputs."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from pathlib import Path

import pytest

from sandstack.plan.ingress import RETRY_DURATION, RETRY_INTERVAL
from sandstack.plan.network import NOT_ESTABLISHED
from sandstack.plan.runtime import ENV_WAKE_TOKEN, RuntimeConfig
from sandstack.plan.stack import plan_stack
from sandstack.plan.tree import Ref, Secret
from sandstack.spec import load_data
from testbed.specs import host, spec

RUNTIME = {"token": {"secret": "runtimeToken"}, "port": 7480}
INGRESS = {"domain": "sbx.example.com", "port": 18443}
WEB = {"base_image": "busybox:1.36", "command": ["sleep", "infinity"], "limits": {"memory": "128MiB"},
       "network": {"egress": "allow-list", "allow": ["api.github.com"]},
       "ports": [{"port": 8080, "exposure": "url", "name": "app"}]}


def _plan(tmp_path: Path, *, runtime: dict | None = RUNTIME, ingress: dict | None = INGRESS, max_: int = 2):
    extra = {**({"runtime": runtime} if runtime else {}), **({"ingress": ingress} if ingress else {})}
    web = WEB if ingress else {**WEB, "ports": [{"port": 8080, "exposure": "host"}]}
    data = spec({"web": web}, {"web": {"template": "web", "hosts": ["local"], "replicas": 1, "max": max_}},
                hosts={"local": host(**extra)})
    return plan_stack(load_data(data, tmp_path), "t")


def _node(plan, suffix: str):
    return next(n for k, n in plan.nodes.items() if k.endswith(suffix))


def test_the_ingress_network_has_a_fixed_subnet_of_its_own_and_the_runtime_serves_on_its_own_address_only(tmp_path):
    host = _plan(tmp_path).hosts["local"]
    wake = host.ingress.wake
    taken = {net.subnet for net in host.networks.values()} | {host.egress_subnet}
    assert wake.subnet not in taken and wake.subnet.prefixlen == 23
    assert wake.subnet.subnet_of(ipaddress.IPv4Network("10.213.0.0/16"))  # the default subnet_pool
    assert (wake.runtime_address, wake.ingress_address) == (str(wake.subnet[1]), str(wake.subnet[-2]))
    assert ipaddress.IPv4Address(wake.ingress_address) not in ipaddress.IPv4Network(wake.ip_range)
    assert host.runtime.config.listen == "127.0.0.1"
    assert wake.upstream == "unix//run/sandstack/runtime/wake.sock"
    assert RuntimeConfig.from_json(host.runtime.config.to_json()) == host.runtime.config


def test_the_network_and_container_nodes_carry_the_fixed_addresses(tmp_path):
    plan = _plan(tmp_path)
    wake = plan.hosts["local"].ingress.wake
    net = _node(plan, "-local-ingress-net")
    assert net.inputs["ipam_configs"] == [{"subnet": str(wake.subnet), "gateway": wake.runtime_address,
                                           "ip_range": wake.ip_range}]
    container = _node(plan, "-local-ingress-container")
    assert container.inputs["networks_advanced"][0]["ipv4_address"] == wake.ingress_address
    # It looks up stopped sandboxes' names: nothing beyond Docker's own names is asked of any resolver off the host.
    assert container.inputs["dns"] == ["127.0.0.1"]
    # The runtime's configuration volume, read-only, where the runtime's socket is (it writes there; the ingress
    # only connects).
    runtime_config = _node(plan, "-local-runtime-config")
    assert {"type": "volume", "source": Ref(runtime_config.key, "name"), "target": "/run/sandstack/runtime",
            "read_only": True} in container.inputs["mounts"]


def test_with_acme_the_ingress_keeps_the_hosts_resolvers(tmp_path):
    plan = _plan(tmp_path, ingress={"domain": "sbx.example.com", "acme_email": "ops@example.com"})
    assert plan.hosts["local"].ingress.wake is not None
    assert "dns" not in _node(plan, "-local-ingress-container").inputs


def test_the_guard_opens_nothing_of_the_host_to_the_ingress_beside_a_runtime(tmp_path):
    host = _plan(tmp_path).hosts["local"]
    bridge = host.ingress.bridge
    # The same rules as without a runtime: the ingress reaches the runtime by its socket, never by the host's address.
    assert [r for r in host.guard.rules if bridge in r] == [f"INPUT -i {bridge} {NOT_ESTABLISHED} -j DROP"]


def test_each_site_asks_the_runtime_then_retries_the_sandbox(tmp_path):
    ingress = _plan(tmp_path).hosts["local"].ingress
    wake = ingress.wake
    text = ingress.caddyfile
    site = "https://8080-web-1.sbx.example.com {\n"
    block = text[text.index(site):].split("\n}\n", 1)[0] + "\n}\n"
    assert block == (
        f"{site}"
        "\ttls internal\n"
        "\treverse_proxy sandstack-t-web-1:8080\n"
        "\thandle_errors {\n"
        "\t\treverse_proxy unix//run/sandstack/runtime/wake.sock {\n"
        "\t\t\tmethod GET\n"
        "\t\t\trewrite /v1/wake?site={host}&sandbox=sandstack-t-web-1\n"
        f'\t\t\theader_up Authorization "Bearer {{env.{ENV_WAKE_TOKEN}}}"\n'
        "\t\t\theader_up -Cookie\n"
        "\t\t\t@woke status 200\n"
        "\t\t\thandle_response @woke {\n"
        '\t\t\t\t@sent expression `!({http.request.method} in ["GET", "HEAD", "OPTIONS"]) || '
        '!({http.request.header.Content-Length} in ["", "0"])`\n'
        "\t\t\t\theader @sent Retry-After 1\n"
        '\t\t\t\trespond @sent "sandbox woke: send the request again" 503\n'
        "\t\t\t\treverse_proxy sandstack-t-web-1:8080 {\n"
        f"\t\t\t\t\tlb_try_duration {RETRY_DURATION}\n"
        f"\t\t\t\t\tlb_try_interval {RETRY_INTERVAL}\n"
        "\t\t\t\t}\n"
        "\t\t\t}\n"
        "\t\t\thandle_response {\n"
        '\t\t\t\trespond "sandbox not running" 502\n'
        "\t\t\t}\n"
        "\t\t}\n"
        "\t}\n"
        "}\n")
    assert text.count("\thandle_errors {") == 2  # the warm sandbox's site and the on-demand place's
    # The catch-all for unknown names wakes nothing.
    assert text.endswith('https://*.sbx.example.com {\n\ttls internal\n\trespond "sandbox not running" 502\n}\n')


def test_without_a_runtime_the_ingress_is_as_before(tmp_path):
    plan = _plan(tmp_path, runtime=None, max_=1)
    ingress = plan.hosts["local"].ingress
    assert ingress.wake is None and "/v1/wake" not in ingress.caddyfile
    # A stopped sandbox's site answers as a name no site has.
    assert ingress.caddyfile.count('\thandle_errors {\n\t\trespond "sandbox not running" 502\n\t}\n') == 1
    assert "ipam_configs" not in _node(plan, "-local-ingress-net").inputs
    container = _node(plan, "-local-ingress-container")
    assert container.inputs["networks_advanced"][0].keys() == {"name"} and "dns" not in container.inputs
    bridge = ingress.bridge
    assert [r for r in plan.hosts["local"].guard.rules if r.startswith(f"INPUT -i {bridge} ")] == [
        f"INPUT -i {bridge} {NOT_ESTABLISHED} -j DROP"]


def test_an_ingress_added_changes_none_of_the_runtime_s_inputs(tmp_path):
    """Its container (environment, mounts, everything) and its configuration set are the same with and without an
    ingress when no pool has url ports to name in its sites."""
    plain = {**WEB, "ports": [{"port": 8080, "exposure": "host"}]}

    def runtime_nodes(extra: dict, folder: str):
        data = spec({"web": plain}, {"web": {"template": "web", "hosts": ["local"], "replicas": 1, "max": 2}},
                    hosts={"local": host(runtime=RUNTIME, **extra)})
        (tmp_path / folder).mkdir()
        plan = plan_stack(load_data(data, tmp_path / folder), "t")
        return [(k, n.inputs, n.options) for k, n in plan.nodes.items() if "-local-runtime-" in k]

    assert runtime_nodes({}, "without") == runtime_nodes({"ingress": INGRESS}, "with")


def test_a_public_runtime_is_reached_by_the_ingress_through_its_socket_too(tmp_path):
    host = _plan(tmp_path, runtime={**RUNTIME, "exposure": "public"}).hosts["local"]
    assert host.runtime.config.listen == "0.0.0.0"
    assert host.ingress.wake is not None and "unix//run/sandstack/runtime/wake.sock" in host.ingress.caddyfile


def test_both_containers_get_the_same_derived_token_and_the_caddyfile_only_names_it(tmp_path):
    plan = _plan(tmp_path)
    label = plan.hosts["local"].ingress.wake.token_label
    expected = Secret("runtimeToken", f"{ENV_WAKE_TOKEN}={{}}", derive=label)
    for role in ("runtime", "ingress"):
        envs = _node(plan, f"-local-{role}-container").inputs["envs"]
        assert [e for e in envs if isinstance(e, Secret) and e.derive] == [expected], role
    caddy = next(e for e in _node(plan, "-local-ingress-reload").inputs["envs"]  # its configuration
                 if isinstance(e, str) and e.startswith("SANDSTACK_CADDYFILE="))
    assert f"{{env.{ENV_WAKE_TOKEN}}}" in caddy and "runtimeToken" not in caddy


def test_a_derived_secret_is_the_hmac_of_the_value_under_its_label():
    secret = Secret("runtimeToken", "WAKE={}", derive="sandstack ingress-wake t/local")
    value = "host-runtime-token-0123456789"
    digest = hmac.new(value.encode(), b"sandstack ingress-wake t/local", hashlib.sha256).hexdigest()
    assert secret.render(value) == f"WAKE={digest}"
    assert value not in secret.render(value)
    assert Secret("runtimeToken", "T={}").render(value) == f"T={value}"
    # Another host or stack: another token, so one host's ingress cannot wake another host's sandboxes.
    assert Secret("runtimeToken", derive="sandstack ingress-wake t/other").render(value) != digest


@pytest.mark.parametrize("subnet_pool", ["10.213.0.0/21", "10.77.0.0/16"])
def test_the_ingress_subnet_is_inside_the_hosts_subnet_pool(tmp_path, subnet_pool):
    data = spec({"web": WEB}, {"web": {"template": "web", "hosts": ["local"], "replicas": 1}},
                hosts={"local": host(runtime=RUNTIME, ingress=INGRESS, subnet_pool=subnet_pool)})
    host_plan = plan_stack(load_data(data, tmp_path), "t").hosts["local"]
    assert host_plan.ingress.wake.subnet.subnet_of(ipaddress.IPv4Network(subnet_pool))
