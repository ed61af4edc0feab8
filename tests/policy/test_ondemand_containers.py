"""Every container the runtime may create is held to the container-level rules, as the warm ones are: `check` judges
a pool's on-demand recipe (a pool of `replicas: 0` has nothing else), and the CrossGuard pack reads the recipes from
the runtime container's configuration. The recipe is read as the Engine API body it is (facts_of_body), which says
the same as the warm sandbox's plan of the same replica."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sandstack.plan.stack import plan_stack
from sandstack.policy.containers import facts_of_body, facts_of_plan
from sandstack.policy.runner import check
from sandstack.spec import load_data
from tests.components.helpers import Built
from tests.policy.test_crossguard import _containers, _violations
from testbed.specs import host, spec, write_spec

RUNTIME = {"token": {"secret": "runtimeToken"}}
UNSAFE = {"base_image": "python:3.12-slim", "user": "0:0", "security": {"privileged": True},
          "lifecycle": {"max_lifetime": "8h"}}


def _data(template: dict, replicas: int, ceiling: int | None, **host_extra) -> dict:
    pool = {"template": "bad", "hosts": ["local"], "replicas": replicas, **({"max": ceiling} if ceiling else {})}
    return spec({"bad": template}, {"bad": pool}, hosts={"local": host(runtime=RUNTIME, **host_extra)})


@pytest.mark.parametrize(("replicas", "ceiling"), [(0, 2), (1, 2), (1, None)], ids=["on-demand only", "both", "warm"])
def test_a_privileged_root_template_is_refused_however_its_sandboxes_are_made(replicas, ceiling, tmp_path):
    # The issue: with `replicas: 0` the pool has no warm sandbox, and `check` judged nothing.
    report = check([str(write_spec(tmp_path, _data(UNSAFE, replicas, ceiling)))], [])
    assert [(f.rule, f.message, f.path, f.line) for f in report.active() if f.rule.startswith("SBX-PRIV")] == [
        ("SBX-PRIV-003", "Template 'bad' must not run as root (user 0:0).", "$.templates.bad.user", 16),
        ("SBX-PRIV-001", "Template 'bad' must not run privileged.", "$.templates.bad.security.privileged", 18)]


@pytest.mark.parametrize("template", [
    UNSAFE,
    {"base_image": "python:3.12-slim", "user": "0:0", "runtime": "runsc",
     "security": {"capabilities": ["NET_RAW"], "no_new_privileges": False},
     "ports": [{"port": 8080, "exposure": "public"}, {"port": 9000, "exposure": "host"}],
     "limits": {"gpus": {"count": 1}}},
    {"base_image": "python:3.12-slim", "filesystem": {"read_only_root": False}},
], ids=["privileged-root", "caps-ports-gpus", "writable-root"])
def test_the_recipe_reads_as_the_warm_sandbox_of_the_same_replica(template, tmp_path):
    extra = {"capacity": {"cpus": 64, "memory": "256GiB", "disk": "1TiB",
                          "gpus": [{"type": "nvidia-l4", "count": 4}]}, "storage_quota": True}
    warm = plan_stack(load_data(_data(template, 3, None, **extra), tmp_path / "warm"), "t")
    ondemand = plan_stack(load_data(_data(template, 1, 3, **extra), tmp_path / "ondemand"), "t")
    recipe = ondemand.hosts["local"].runtime.config.pools["bad"].ondemand
    plans = next(iter(warm.pools.values())).sandbox_plans
    for index in (1, 2):
        place = f"sandstack-t-bad-{index}"
        # url ports are the ingress's to serve, not the container's: the pack reads them from the ingress.
        assert facts_of_body(recipe.body(place)) == replace(facts_of_plan(plans[index]), url_ports=())


def test_the_pack_judges_each_on_demand_slot_from_the_runtime_s_configuration(tmp_path):
    built = Built.from_spec(tmp_path / "spec", _data(UNSAFE, 0, 2),
                            secret_config={"runtimeToken": "r" * 20})
    containers = _containers(built)
    assert "sandstack-t-bad-0" not in containers  # no warm sandbox: only the runtime makes them
    # The recipes are the runtime's configuration, which its reload container delivers (docs/design/live-changes.md).
    props, urn = containers["sandstack-local-runtime-reload"]
    fixes = {"privileged": "Remove `security.privileged`; add only the capabilities the workload needs.",
             "root": "Set `user` to an unprivileged uid:gid such as '10001:10001'."}
    assert _violations(props, "sandstack-local-runtime-reload", None, urn) == [
        f"Container 'sandstack-t-bad-{i}' (created on demand by the runtime, from its recipe) {message}"
        for message in (f"must not run privileged. {fixes['privileged']}",
                        f"must not run as root (user 0:0). {fixes['root']}") for i in (0, 1)]
    # A safe template's recipes pass, and the runtime itself stays exempt.
    safe = {**UNSAFE, "user": "10001:10001", "security": {}}
    built = Built.from_spec(tmp_path / "safe", _data(safe, 0, 2), secret_config={"runtimeToken": "r" * 20})
    props, urn = _containers(built)["sandstack-local-runtime-container"]
    assert _violations(props, "sandstack-local-runtime-reload", None, urn) == []


def test_a_runtime_s_configuration_outside_sandstack_s_tree_is_not_read_as_its_exemption(tmp_path):
    # The same container outside sandstack's component tree is a container like any other: judged on its own
    # inputs (root, the Docker socket's runc...), never excused by what its environment says it would create.
    built = Built.from_spec(tmp_path / "spec", _data(UNSAFE, 0, 2), secret_config={"runtimeToken": "r" * 20})
    props, _ = _containers(built)["sandstack-local-runtime-reload"]
    found = _violations(props, "r")
    assert found and all(message.startswith("Container 'r' ") for message in found)
