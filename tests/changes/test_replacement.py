"""Replacement behaviour is deliberate: successive `pulumi up`s on the dry harness, one spec change at a time."""

from __future__ import annotations

import shutil

import pytest

from sandstack.plan.changes import NEVER_APPLIED, sandbox_replace_on_changes
from testbed.provider.schema import STATE_ONLY
from testbed.provider.tables import MAPPINGS
from testbed.specs import DEV_SECRETS, STACKS, changed, spec, stack_program

BASE = spec(
    {
        "agent": {"base_image": "busybox:1.36", "snapshot": {"version": "1", "setup": ["true"]},
                  "limits": {"cpus": 1, "memory": "256MiB", "disk": "256MiB", "pids": 64},
                  "network": {"egress": "allow-list", "allow": ["example.com"]},
                  "readiness": {"command": ["true"], "interval": "5s"}},
        "other": {"base_image": "busybox:1.36"},
    },
    pools={"agent": {"template": "agent", "hosts": ["local"], "replicas": 2},
           "other": {"template": "other", "hosts": ["local"]}},
)
EVERYTHING = 21  # infra image, 2 snapshot images, guard, gateway and logger (volume + container each, and a
#                  configuration volume and a reload container each), 3 networks (agent, other, egress), 3 sandboxes


def _changes(result) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {f"{a.kind} {a.name}": a.changed for a in result.actions if a.kind != "same"}


def test_the_dev_stack_run_twice_changes_nothing_the_second_time(dry_harness, tmp_path):
    shutil.copytree(STACKS, tmp_path / "stacks")
    program = stack_program(tmp_path / "stacks" / "dev.yaml", stack="dev")
    first = dry_harness.run(program, secret_config=DEV_SECRETS)
    # 4 images (infra + 3 snapshots: builder extends preview and shares its image), guard, gateway, runtime and
    # connection logger (volume + container each; the guard, the gateway and the logger a configuration volume and a
    # reload container too), 5 networks, 6 sandboxes
    assert first.summary() == {"create": 31, "update": 0, "replace": 0, "delete": 0, "same": 0, "build": 4}
    again = dry_harness.run(program, secret_config=DEV_SECRETS)
    assert again.summary() == {"create": 0, "update": 0, "replace": 0, "delete": 0, "same": 31, "build": 0}
    assert again.outputs == first.outputs


def test_the_same_spec_again_is_all_same(up):
    assert up(BASE).summary() == {"create": EVERYTHING, "update": 0, "replace": 0, "delete": 0, "same": 0,
                                  "build": 3}
    assert up(BASE).summary() == {"create": 0, "update": 0, "replace": 0, "delete": 0, "same": EVERYTHING,
                                  "build": 0}


def test_bumping_the_snapshot_version_rebuilds_and_moves_only_that_pool(up):
    first = up(BASE)
    result = up(changed(BASE, "templates.agent.snapshot.version", "2"))
    assert _changes(result) == {
        "replace sandstack-agent.local-image": ("build", "name", "triggers"),
        "replace sandstack-agent.local-0": ("image", "labels"),
        "replace sandstack-agent.local-1": ("image", "labels"),
        "delete sandstack-agent.local-image": (),  # the superseded snapshot, after the sandboxes moved off it
    }
    assert result.builds == 1
    assert result.action("sandstack-agent.local-image", "replace").detail.startswith("create-before-delete")
    old, new = (r.outputs["sandboxes"][0] for r in (first, result))
    assert (old["version"], new["version"]) == ("1", "2")
    assert new["image"] == f"sandstack-t/agent:2-{new['digest'][:12]}"


def test_changing_a_setup_step_rebuilds_even_with_the_same_version(up):
    up(BASE)
    result = up(changed(BASE, "templates.agent.snapshot.setup", ["true", "echo more"]))
    assert set(_changes(result)) == {"replace sandstack-agent.local-image", "replace sandstack-agent.local-0",
                                     "replace sandstack-agent.local-1", "delete sandstack-agent.local-image"}


def test_changing_only_memory_updates_the_sandboxes_in_place(up):
    up(BASE)
    result = up(changed(BASE, "templates.agent.limits.memory", "512MiB"))
    assert _changes(result) == {"update sandstack-agent.local-0": ("memory", "memorySwap"),
                                "update sandstack-agent.local-1": ("memory", "memorySwap")}


def test_changing_cpus_replaces_the_sandboxes(up):
    up(BASE)
    result = up(changed(BASE, "templates.agent.limits.cpus", 2))
    assert _changes(result) == {"replace sandstack-agent.local-0": ("cpus",),
                                "replace sandstack-agent.local-1": ("cpus",)}


@pytest.mark.parametrize("path, value, fields", [
    ("templates.agent.filesystem", {"writable": [{"path": "/tmp", "size": "128MiB"}]}, ("tmpfs",)),
    ("templates.agent.readiness", {"command": ["true"], "interval": "7s"}, ("healthcheck", "waitTimeout")),
])
def test_inputs_the_provider_would_not_apply_replace_instead_of_a_silent_update(up, path, value, fields):
    up(BASE)
    result = up(changed(BASE, path, value))
    assert _changes(result) == {"replace sandstack-agent.local-0": fields, "replace sandstack-agent.local-1": fields}


def test_one_more_replica_creates_one_sandbox_and_renews_the_guards_pids_list(up):
    up(BASE)
    result = up(changed(BASE, "pools.agent.replicas", 3))
    # The guard's configuration holds every sandbox's pids limit: its reload container runs again and the guard takes
    # it in place (its rules and clocks untouched) before the new sandbox starts under its cgroup parent.
    assert _changes(result) == {"create sandstack-agent.local-2": (),
                                "replace sandstack-local-guard-reload": ("envs",)}


def test_one_replica_less_deletes_the_last_sandbox_only(up):
    up(BASE)
    result = up(changed(BASE, "pools.agent.replicas", 1))
    assert _changes(result) == {"replace sandstack-local-guard-reload": ("envs",),
                                "delete sandstack-agent.local-1": ()}


def test_adding_a_gateway_pool_adds_its_objects_and_renews_guard_gateway_and_resolver_only(up):
    up(BASE)
    more = changed(BASE, "templates.logged", {"base_image": "busybox:1.36", "network": {"egress": "allow-all"}})
    more["pools"]["logged"] = {"template": "logged", "hosts": ["local"]}
    result = up(more)
    # `logged` has the snapshot content of `other` (busybox, no setup): it runs on other's image, nothing is built.
    assert _changes(result) == {
        "create sandstack-local-net.logged": (), "create sandstack-logged.local-0": (),
        "replace sandstack-local-guard-reload": ("envs",),  # rules, pids and bridges of the new pool, in place
        # its squid.conf and the new pool's network, joined by its reload container: the gateway keeps running
        "replace sandstack-local-gateway-reload": ("envs",),
        # a logging resolver for the new pool, started by the logger in place
        "replace sandstack-local-logger-reload": ("envs",),
    }


def test_the_first_gateway_pool_brings_the_gateway_and_leaves_other_sandboxes_alone(up):
    closed = spec({"other": {"base_image": "busybox:1.36"}})
    up(closed)
    more = changed(closed, "templates.agent", {"base_image": "busybox:1.36",
                                               "network": {"egress": "allow-list", "allow": ["example.com"]}})
    more["pools"]["agent"] = {"template": "agent", "hosts": ["local"]}
    result = up(more)
    assert _changes(result) == {  # agent runs on other's image (the same snapshot content)
        "create sandstack-local-net.agent": (), "create sandstack-local-egress-net": (), "create sandstack-local-gateway-log": (),
        "create sandstack-local-gateway-container": (), "create sandstack-agent.local-0": (),
        "create sandstack-local-gateway-config": (), "create sandstack-local-gateway-reload": (),
        "create sandstack-local-logger-log": (), "create sandstack-local-logger-container": (),  # its resolver
        "create sandstack-local-logger-config": (), "create sandstack-local-logger-reload": (),
        "replace sandstack-local-guard-reload": ("envs",),
    }


def test_changing_an_allow_entry_renews_only_the_gateway_and_the_resolver(up):
    up(BASE)
    result = up(changed(BASE, "templates.agent.network.allow", ["example.com", "example.org"]))
    assert _changes(result) == {"replace sandstack-local-gateway-reload": ("envs",),  # taken in place
                                "replace sandstack-local-logger-reload": ("envs",)}


def test_changing_the_subnet_pool_moves_the_pools_network_and_its_sandboxes(up):
    up(BASE)
    result = up(changed(BASE, "hosts.local.subnet_pool", "10.99.0.0/16"))
    changes = _changes(result)
    assert changes["replace sandstack-local-net.agent"] == ("ipamConfigs",)
    assert {"replace sandstack-agent.local-0", "replace sandstack-agent.local-1",
            "replace sandstack-other.local-0"} <= set(changes)


HARDENED = {
    "base_image": "busybox:1.36",
    "limits": {"memory": "512MiB"},
    "filesystem": {"writable": [{"path": "/tmp", "size": "64MiB"}, {"path": "/work", "size": "128MiB"}]},
}


@pytest.mark.parametrize("path, value, fields", [
    ("filesystem.shm_size", "32MiB", ("shmSize",)),
    ("filesystem.writable", [{"path": "/tmp", "size": "64MiB", "exec": True}, {"path": "/work", "size": "128MiB"}],
     ("tmpfs",)),
    ("limits.open_files", 4096, ("ulimits",)),
])
def test_changing_a_hardening_input_replaces_the_sandbox(up, path, value, fields):
    """The field's change effect is 'replace': the provider applies none of these to a running container."""
    up(spec({"t": HARDENED}))
    result = up(spec({"t": changed(HARDENED, path, value)}))
    assert _changes(result) == {"replace sandstack-t.local-0": fields}


def test_replace_on_changes_is_exactly_what_the_provider_never_applies(up):
    """A sandbox's list comes from the change table (readiness → healthcheck, writable paths → tmpfs) and the
    plan's own settings; it is exactly the inputs it sets that the provider keeps in state only (harness
    table), and the guard's and gateway's lists cover theirs."""
    result = up(BASE)
    container = MAPPINGS["docker:index/container:Container"]
    snake = {"waitTimeout": "wait_timeout", "destroyGraceSeconds": "destroy_grace_seconds"}

    def state_only(reg) -> set[str]:
        return {snake.get(f, f) for f in reg.inputs if container.by_name[f].change == STATE_ONLY}

    regs = {r.name: r for r in result.registrations.values()}
    sandbox = regs["sandstack-agent.local-0"]
    assert state_only(sandbox) == set(sandbox_replace_on_changes()) == set(NEVER_APPLIED)
    assert [snake.get(f, f) for f in sandbox.request.replace_on_changes] == sandbox_replace_on_changes()
    for name in ("sandstack-local-guard-container", "sandstack-local-gateway-container"):
        assert state_only(regs[name]) <= set(NEVER_APPLIED)
        assert {snake.get(f, f) for f in regs[name].request.replace_on_changes} == set(NEVER_APPLIED)
