"""The sandbox plan, without Pulumi: what a spec decides about one sandbox container, as plain values."""

from __future__ import annotations

import ipaddress

from sandstack.plan.network import plan_pool_network
from sandstack.plan.sandbox import SUPERVISOR_ENTRYPOINT, Healthcheck, PortBinding, plan_sandbox
from sandstack.spec import load_stack
from testbed.specs import spec, write_spec

SUBNET = ipaddress.IPv4Network("10.213.64.0/23")


def _plan(tmp_path, template: dict, index: int = 0, gateway_port: int | None = None):
    resolved = load_stack(write_spec(tmp_path, spec({"p": template})))
    t = resolved.templates["p"]
    network = plan_pool_network("t", "p", t, gateway_port, SUBNET)
    return plan_sandbox(stack="t", pool="p", host="local", template=t, index=index, network=network,
                        digest="d" * 64, labels={"sandstack.stack": "t"})


def test_a_plain_sandbox_gets_every_secure_default(tmp_path):
    plan = _plan(tmp_path, {"base_image": "busybox:1.36"}, index=2)
    assert (plan.name, plan.hostname, plan.user, plan.cgroup_parent) == (
        "sandstack-t-p-2", "p-2", "10001:10001", "/sandstack/sandstack-t-p-2")
    assert plan.entrypoints == SUPERVISOR_ENTRYPOINT and plan.command is None
    assert (plan.read_only, plan.storage_opts, plan.privileged, plan.capability_adds) == (True, None, False, ())
    assert plan.security_opts == ("no-new-privileges:true",)
    # Beside the template's own: the session secrets' tmpfs, its user's alone (sandstack.runtime.secret_files).
    assert plan.tmpfs == {"/tmp": f"rw,nosuid,nodev,noexec,size={64 * 1024**2},mode=1777",
                          "/run/secrets/session": f"rw,nosuid,nodev,noexec,size={4 * 1024**2},mode=0700,uid=10001,gid=10001"}
    assert (plan.memory_mb, plan.cpus, plan.open_files, plan.shm_size_mb) == (512, "1", 1024, 16)
    assert (plan.restart, plan.max_retry_count, plan.healthcheck, plan.wait_timeout) == ("on-failure", 3, None, None)
    assert plan.env == {} and plan.ports == ()
    assert plan.labels["sandstack.replica"] == "2" and plan.labels["sandstack.subnet"] == "10.213.64.0/23"


def test_a_gateway_pool_gets_its_proxy_settings_and_readiness_its_healthcheck(tmp_path):
    template = {"base_image": "busybox:1.36", "env": {"A": "1"},
                "network": {"egress": "allow-list", "allow": ["example.com"]},
                "ports": [{"port": 8080, "exposure": "host"}, {"port": 9000}],
                "readiness": {"command": ["true"], "interval": "2s", "timeout": "1s", "retries": 3}}
    plan = _plan(tmp_path, template, gateway_port=31000)
    proxy = "http://sandstack-gateway:31000"
    assert plan.env == {"A": "1", "HTTPS_PROXY": proxy, "HTTP_PROXY": proxy, "NO_PROXY": "localhost,127.0.0.1,::1",
                        "http_proxy": proxy, "https_proxy": proxy, "no_proxy": "localhost,127.0.0.1,::1"}
    assert plan.ports == (PortBinding(8080, None, "127.0.0.1", "tcp"),)  # exposure none is not published
    assert plan.healthcheck == Healthcheck(("CMD", "true"), "2s", "1s", 3, "0s")
    assert plan.wait_timeout == 0 + (3 + 2) * (2 + 1) + 30


def test_the_plan_modules_import_without_pulumi():
    # Plans are computed and tested without the Pulumi SDK or the provider's (issue: a pure plan layer).
    import subprocess
    import sys

    code = ("import importlib, pkgutil, sys, sandstack.plan as plan\n"
            "names = [m.name for m in pkgutil.iter_modules(plan.__path__)]\n"
            "for name in names: importlib.import_module('sandstack.plan.' + name)\n"
            "assert len(names) >= 8, names\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'pulumi', 'pulumi_docker'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
