"""A host's plan, without Pulumi: the guard's and gateway's settings as values, equal to what the components
register (so previews and diffs that read the plan show what `pulumi up` does)."""

from __future__ import annotations

from pathlib import Path

from sandstack.plan.host import plan_hosts
from sandstack.spec import load_stack
from tests.components.helpers import Built, env_map, role_config
from testbed.specs import spec, write_spec

TEMPLATES = {
    "listed": {"base_image": "busybox:1.36", "network": {"egress": "allow-list", "allow": ["example.com"]},
               "lifecycle": {"max_lifetime": "1h", "idle_timeout": "10m"},
               "readiness": {"command": ["true"], "interval": "5s"}},
    "closed": {"base_image": "busybox:1.36", "limits": {"pids": 64}},
}


def test_the_host_plan_is_what_the_components_register(tmp_path: Path):
    path = write_spec(tmp_path / "spec", spec(TEMPLATES, pools={
        "listed": {"template": "listed", "hosts": ["local"]},
        "closed": {"template": "closed", "hosts": ["local"], "replicas": 2}}))
    plan = plan_hosts(load_stack(path), "t")["local"]
    built = Built.from_path(path)

    guard = built.container("sandstack-local-guard-container")
    assert guard.inputs["name"] == plan.guard.container_name
    assert [f"{k}={v}" for k, v in env_map(guard).items()] == plan.guard.env
    assert role_config(built, "guard") == {**dict(plan.guard.config.items), **{
        k: v for k, v in role_config(built, "guard").items() if k.startswith("SANDSTACK_CONFIG_")}}
    assert role_config(built, "guard")["SANDSTACK_CONFIG_DIGEST"] == plan.guard.config.digest
    assert plan.guard.pids == (("sandstack-t-closed-0", 64), ("sandstack-t-closed-1", 64),
                               ("sandstack-t-listed-0", 256), ("sandstack-t_gateway", 512))
    # 1 h lifetime, 10 min idle, stop; 20 ms/s idle CPU plus the 5 s probe's share (100 ms / 5 s) and burst.
    assert "sandstack-t-listed-0 3600 600 stop 40000 100000" in plan.guard.lifecycle

    assert plan.gateway is not None and [p.pool for p in plan.gateway.pools] == ["listed"]
    gateway = built.container("sandstack-local-gateway-container")
    assert gateway.inputs["name"] == plan.gateway.container_name
    assert env_map(gateway) == {"SANDSTACK_CONFIG_DIR": "/run/sandstack/config"}
    assert role_config(built, "gateway")["SQUID_CONF"] == plan.gateway.squid_conf
    assert role_config(built, "gateway")["SANDSTACK_CONFIG_DIGEST"] == plan.gateway.config.digest
    assert gateway.inputs["cgroupParent"] == plan.gateway.cgroup_parent == "/sandstack/sandstack-t_gateway"
    assert {n.name for n in plan.networks.values()} == {built.reg(f"sandstack-local-net.{p}").inputs["name"]
                                                        for p in ("listed", "closed")}
    assert plan.egress_network == built.reg("sandstack-local-egress-net").inputs["name"]
    assert plan.infra.name == built.reg("sandstack-local-infra").inputs["name"] and not plan.infra.declared


def test_a_host_without_gateway_pools_has_no_gateway_in_its_plan(tmp_path: Path):
    path = write_spec(tmp_path / "spec", spec({"closed": TEMPLATES["closed"]}))
    plan = plan_hosts(load_stack(path), "t")["local"]
    assert plan.gateway is None and plan.egress_bridge is None and plan.egress_network is None
    assert plan.address == "localhost"
