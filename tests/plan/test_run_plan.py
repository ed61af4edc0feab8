"""How each container is kept running, and the names and addresses the components used to decide, as plans
without Pulumi: restart policy, health check, waits, stop grace and log rotation of every role; the snapshot's
repository and labels; the runtime's URL; a sandbox's output name and port addresses. The component tests
assert the inputs and outputs registered from them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sandstack.plan.container import Healthcheck, LogRotation, RunSettings
from sandstack.plan.host import plan_hosts
from sandstack.plan.ingress import HEALTH_TEST as INGRESS_HEALTH
from sandstack.plan.gateway import HEALTH_TEST as GATEWAY_HEALTH
from sandstack.plan.guard import HEALTH_TEST as GUARD_HEALTH
from sandstack.plan.sandbox import output_name, port_address
from sandstack.plan.snapshot import image_labels, plan_snapshot
from sandstack.spec import load_stack
from sandstack.spec.models.hosts import Ingress
from testbed.specs import STACKS, host, spec, write_spec


@pytest.fixture(scope="module")
def dev():
    return plan_hosts(load_stack(STACKS / "dev.yaml"), "dev")["local"]


@pytest.fixture(scope="module")
def prod():
    return plan_hosts(load_stack(STACKS / "prod.yaml"), "prod")["sbx-a"]


def test_the_guard_and_gateway_get_time_to_stop_and_the_guard_fewer_retries(dev):
    assert dev.guard.run == RunSettings(Healthcheck(("CMD-SHELL", GUARD_HEALTH), "2s", "2s", 3, "1s"), 60,
                                        LogRotation("1m", 2), "unless-stopped", None, 10)
    # The gateway is healthy only once configured: `pulumi up` waits for its reload container instead of for it.
    assert dev.gateway.run == RunSettings(Healthcheck(GATEWAY_HEALTH, "2s", "2s", 5, "1s"), None,
                                          LogRotation("10m", 5), "unless-stopped", None, 10, wait_for_health=False)
    assert not dev.gateway.run.wait


def test_the_logger_ingress_and_runtime_stop_in_dockers_default_time(dev, prod):
    assert dev.logger.run == RunSettings(Healthcheck(dev.logger.health_test, "2s", "2s", 5, "1s"), 60,
                                         LogRotation("1m", 2))
    # The ingress is healthy only once configured: `pulumi up` waits for its reload container instead.
    assert prod.ingress.run == RunSettings(Healthcheck(INGRESS_HEALTH, "2s", "2s", 5, "1s"), None,
                                           LogRotation("10m", 5), wait_for_health=False)
    # A slow first start is allowed for: 20 retries of 5 s timeouts after 10 s. It serves once configured, like the
    # ingress: its reload container waits for it (two minutes) instead.
    # Its stop may hibernate on-demand sandboxes: two minutes, with or without them (a `max` added renews nothing).
    assert dev.runtime.run == RunSettings(Healthcheck(dev.runtime.health_test, "2s", "5s", 20, "10s"), None,
                                          LogRotation("10m", 5), destroy_grace_seconds=120, wait_for_health=False)
    assert dev.runtime.config_set.wait_seconds == 120
    assert [(run.restart, run.wait) for run in (dev.logger.run, prod.ingress.run, dev.runtime.run)] == [
        ("unless-stopped", True), ("unless-stopped", False), ("unless-stopped", False)]
    assert (dev.logger.run.destroy_grace_seconds, prod.ingress.run.destroy_grace_seconds) == (None, None)


def test_log_rotation_is_dockers_json_file_with_string_options():
    assert (LogRotation("1m", 2).driver, LogRotation("1m", 2).opts) == ("json-file", {"max-size": "1m", "max-file": "2"})


def test_a_host_without_a_runtime_has_no_runtime_url_and_one_with_a_loopback_runtime_gets_its_loopback(dev, prod):
    assert dev.runtime_url == "http://127.0.0.1:7480"
    assert prod.runtime_url is None


def test_a_public_runtime_is_reached_on_the_hosts_address(tmp_path):
    runtime = {"token": {"secret": "tok"}, "exposure": "public", "port": 9000}
    data = spec({"t": {"base_image": "busybox:1.36"}}, pools={"t": {"template": "t", "hosts": ["h"]}},
                hosts={"h": host("ssh://deploy@h.example.com", runtime=runtime)})
    plan = plan_hosts(load_stack(write_spec(tmp_path, data)), "t")["h"]
    assert plan.runtime_url == "http://h.example.com:9000"


def test_the_snapshot_repository_is_the_stacks_own_unless_the_template_pushes(tmp_path):
    data = spec({"a": {"base_image": "busybox:1.36"},
                 "b": {"base_image": "busybox:1.36", "snapshot": {"push_to": "registry.example.com/team/b"}}})
    templates = load_stack(write_spec(tmp_path, data)).templates
    a, b = plan_snapshot(templates["a"], "t"), plan_snapshot(templates["b"], "t")
    assert (a.repository, a.image) == ("sandstack-t/a", f"sandstack-t/a:{a.tag}")
    assert (b.repository, b.image) == ("registry.example.com/team/b", f"registry.example.com/team/b:{b.tag}")
    assert image_labels(templates["a"], "t", {"sandstack.host": "local", "zone": "z"}, a.digest) == {
        "sandstack.digest": a.digest, "sandstack.host": "local", "sandstack.managed-by": "pulumi",
        "sandstack.stack": "t", "sandstack.template": "a", "sandstack.version": "", "zone": "z"}


def test_a_sandbox_is_named_host_pool_index_in_the_stacks_outputs():
    assert output_name("local", "python", 0) == "local/python/0"


INGRESS = Ingress(domain="h.example.com", port=8443)


@pytest.mark.parametrize(("exposure", "external", "ingress", "address"), [
    ("host", 32768, None, "127.0.0.1:32768"),
    ("public", 8080, None, "h.example.com:8080"),
    ("public", None, None, None),  # not published (yet): no address
    ("none", None, None, None),
    ("url", None, INGRESS, "https://3000-web-1.h.example.com:8443"),
    ("url", None, None, None),  # a url port on a host without an ingress
])
def test_a_ports_address_in_the_outputs(exposure, external, ingress, address):
    port = SimpleNamespace(port=3000, exposure=exposure)
    assert port_address(port, external, host_address="h.example.com", ingress=ingress, pool="web",
                        index=1) == address
