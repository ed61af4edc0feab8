"""The host guard (and the gateway's own confinement): exact inputs, and what waits for them."""

from __future__ import annotations

import pytest

from sandstack.plan.gateway import ENTRYPOINT
from sandstack.plan.contract import cgroup_parent
from sandstack.plan.package_files import RELOAD_SOURCE
from sandstack.plan.reload import ConfigSet
from sandstack.plan.stack_host import GUARD_PROGRAM, GUARD_SCRIPT
from sandstack.plan.guard import HEALTH_TEST
from sandstack.plan.naming import bridge_name
from sandstack.plan.network import gateway_ports
from tests.components.helpers import CONTAINER, NETWORK, env_map
from testbed.specs import spec

LIMITS = {"cpus": 1, "memory": "256MiB", "disk": "256MiB"}
TEMPLATES = {
    "closed": {"base_image": "busybox:1.36", "limits": {**LIMITS, "pids": 64}},
    "listed": {"base_image": "busybox:1.36", "limits": {**LIMITS, "pids": 128},
               "network": {"egress": "allow-list", "allow": ["example.com"]}},
}
POOLS = {"closed": {"template": "closed", "hosts": ["local"], "replicas": 2},
         "listed": {"template": "listed", "hosts": ["local"]}}
LABELS = [{"label": "sandstack.host", "value": "local"}, {"label": "sandstack.managed-by", "value": "pulumi"},
          {"label": "sandstack.stack", "value": "t"}]
NEW = "-m conntrack ! --ctstate ESTABLISHED,RELATED"

# What the provider never applies in place: a change of any of them replaces the container.
HOST_REPLACE_ON_CHANGES = ("destroyGraceSeconds", "healthcheck", "init", "tmpfs", "wait", "waitTimeout")


@pytest.fixture
def built(build):
    return build(spec(TEMPLATES, pools=POOLS))


def test_guard_container_inputs(built):
    guard = built.container("sandstack-local-guard-container")
    assert guard.inputs == {
        "name": "sandstack-t_guard",
        "image": built.reg("sandstack-local-infra").outputs["imageId"],
        "networkMode": "host",
        # The host's PID namespace and KILL: lifetimes are enforced from outside the sandboxes.
        "pidMode": "host",
        "command": ["sh", "-c", GUARD_PROGRAM, "sandstack-guard"],
        # Nothing that changes with pools or sandboxes: those are its configuration (its reload container's).
        "envs": [
            "SANDSTACK_STACK=t",
            # The documented expiry statuses (sandstack.spec.models.limits), which the script does not repeat.
            "SANDSTACK_EXIT_LIFETIME=124",
            "SANDSTACK_EXIT_IDLE=123",
            # The contract's paths and cgroup subtree (sandstack/plan/contract.py), which the script does not
            # repeat either.
            "SANDSTACK_GUARD_CGROUP=/host-cgroup",
            "SANDSTACK_GUARD_CGROUP_ROOT=sandstack",
            "SANDSTACK_GUARD_STATE=/state",
            "SANDSTACK_CONFIG_DIR=/run/sandstack/config",
            "SANDSTACK_GUARD_WORKSPACES=/workspaces",
        ],
        # MKNOD, the loop devices and the workspaces' directory on every host: a disk workspace is configuration.
        "capabilities": {"drops": ["ALL"], "adds": ["NET_ADMIN", "NET_RAW", "DAC_OVERRIDE", "KILL", "MKNOD"]},
        "securityOpts": ["no-new-privileges:true"],
        "readOnly": True,
        "tmpfs": {"/tmp": "rw,nosuid,nodev,noexec,size=8m"},
        "mounts": [{"type": "bind", "source": "/sys/fs/cgroup", "target": "/host-cgroup"},
                   {"type": "volume", "source": "sandstack-t_guard-state", "target": "/state"},
                   {"type": "volume", "source": "sandstack-t_guard-config", "target": "/run/sandstack/config"}],
        "volumes": [{"hostPath": "/var/lib/sandstack/workspaces/t", "containerPath": "/workspaces"}],
        "devices": [{"hostPath": "/dev/loop-control"}],
        "deviceCgroupRules": ["b 7:* rwm"],
        "memory": 64,
        "memorySwap": 64,
        "cpus": "0.5",
        "restart": "unless-stopped",
        "destroyGraceSeconds": 10,
        "healthcheck": {"tests": ["CMD-SHELL", HEALTH_TEST], "interval": "2s", "timeout": "2s", "retries": 3,
                        "startPeriod": "1s"},
        "wait": True,
        "waitTimeout": 60,
        "logDriver": "json-file",
        "logOpts": {"max-size": "1m", "max-file": "2"},
        "labels": LABELS + [{"label": "sandstack.role", "value": "guard"}],
    }
    assert guard.request.replace_on_changes == HOST_REPLACE_ON_CHANGES
    assert (guard.plan.host["NetworkMode"], guard.plan.host["Privileged"]) == ("host", False)
    assert guard.plan.host["CapAdd"] == ["NET_ADMIN", "NET_RAW", "DAC_OVERRIDE", "KILL", "MKNOD"]


def test_the_guards_configuration_is_its_reload_containers(built):
    closed, listed, egress = (bridge_name("t", "closed", "none-internal"),
                              bridge_name("t", "listed", "gateway-internal"), bridge_name("t", "egress"))
    port = gateway_ports("t", ["listed"])["listed"]
    reload = built.container("sandstack-local-guard-reload")
    items = [
        "SANDSTACK_RULES=" + "\n".join([
            f"INPUT -i {closed} {NEW} -j DROP",
            f"INPUT -i {listed} {NEW} -j DROP",
            # Only to and from the gateway's fixed address on listed's /23 (10.213.98.0/23).
            f"DOCKER-USER -i {listed} -o {listed} -d 10.213.99.254/32 -p tcp --dport {port} -j ACCEPT",
            f"DOCKER-USER -i {listed} -o {listed} -s 10.213.99.254/32 -p tcp --sport {port} "
            "-m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
            # Inserted above the ACCEPT: bounded connections to the gateway, per pool and per sandbox.
            f"DOCKER-USER -i {listed} -o {listed} -d 10.213.99.254/32 -p tcp --dport {port} --syn -m connlimit "
            "--connlimit-above 1024 --connlimit-mask 0 -j REJECT --reject-with tcp-reset",
            f"DOCKER-USER -i {listed} -o {listed} -d 10.213.99.254/32 -p tcp --dport {port} --syn -m connlimit "
            "--connlimit-above 256 --connlimit-mask 32 -j REJECT --reject-with tcp-reset",
            # Inserted above the INPUT drop: the logging resolver on listed's bridge address, port 53 only.
            f"INPUT -i {listed} -d 10.213.98.1/32 -p udp --dport 53 -j ACCEPT",
            f"INPUT -i {listed} -d 10.213.98.1/32 -p tcp --dport 53 -j ACCEPT",
            f"INPUT -i {egress} {NEW} -j DROP",
            # Inserted above it: the gateway's logging resolver on the egress bridge's address (10.213.48.0/23).
            f"INPUT -i {egress} -d 10.213.48.1/32 -p udp --dport 53 -j ACCEPT",
            f"INPUT -i {egress} -d 10.213.48.1/32 -p tcp --dport 53 -j ACCEPT",
            f"DOCKER-USER -i {egress} ! -o {egress} -d 169.254.0.0/16 -j DROP",
        ]),
        "SANDSTACK_PIDS=sandstack-t-closed-0 64\nsandstack-t-closed-1 64\nsandstack-t-listed-0 128"
        "\nsandstack-t_gateway 512",
        "SANDSTACK_BRIDGES=" + " ".join(sorted([closed, listed, egress])),
        # The built-in 24 h lifetime, no idle timeout, no readiness probe to allow for.
        "SANDSTACK_LIFECYCLE=sandstack-t-closed-0 86400 0 stop 20000 0\nsandstack-t-closed-1 86400 0 stop 20000 0"
        "\nsandstack-t-listed-0 86400 0 stop 20000 0",
        "SANDSTACK_WORKSPACES=",
    ]
    digest = ConfigSet("guard", tuple(tuple(i.split("=", 1)) for i in items)).digest
    guard = built.container("sandstack-local-guard-container")
    assert reload.inputs == {
        "name": "sandstack-t_guard-reload",
        "image": built.reg("sandstack-local-infra").outputs["imageId"],
        "command": ["python3", "-c", RELOAD_SOURCE.read_text()],
        "envs": ["SANDSTACK_CONFIG_DIR=/run/sandstack/config", f"SANDSTACK_CONFIG_DIGEST={digest}",
                 "SANDSTACK_CONFIG_KEYS=SANDSTACK_RULES SANDSTACK_PIDS SANDSTACK_BRIDGES SANDSTACK_LIFECYCLE "
                 "SANDSTACK_WORKSPACES", "SANDSTACK_CONFIG_SERVICE=sandstack-t_guard", "SANDSTACK_CONFIG_WAIT=60",
                 *items],
        # No network, no capability, no Docker socket (it joins the guard to no network): it writes a volume.
        "networkMode": "none",
        "capabilities": {"drops": ["ALL"]},
        "securityOpts": ["no-new-privileges:true"],
        "readOnly": True,
        "memory": 48,
        "memorySwap": 48,
        "cpus": "0.25",
        "mounts": [{"type": "volume", "source": "sandstack-t_guard-config", "target": "/run/sandstack/config"}],
        # Run once per configuration: Pulumi waits for its end, the component fails the apply on its exit status.
        "attach": True,
        "mustRun": False,
        "logs": True,
        "logDriver": "json-file",
        "logOpts": {"max-size": "1m", "max-file": "1"},
        "labels": LABELS + [{"label": "sandstack.role", "value": "guard-reload"}],
    }
    # After the guard, and renewed with it: it names the guard as a dependency (Pulumi's dependent rule).
    assert guard.urn in reload.request.dependencies
    assert ("envs", (guard.urn,)) in reload.request.property_dependencies
    assert built.reg("sandstack-local-guard-config").request.delete_before_replace is True


def test_guard_state_volume_goes_before_its_replacement(built):
    state = built.reg("sandstack-local-guard-state")
    assert state.inputs == {"name": "sandstack-t_guard-state", "labels": LABELS}
    assert state.request.delete_before_replace is True


def test_every_pids_entry_is_a_sandboxs_or_the_gateways_cgroup_parent(built):
    guard_env = env_map(built.reg("sandstack-local-guard-reload"))
    pids = dict(line.split() for line in guard_env["SANDSTACK_PIDS"].split("\n"))
    limited = [r for r in built.mocks.by_type(CONTAINER)
               if r.name.startswith(("sandstack-closed.local-", "sandstack-listed.local-"))
               or r.name == "sandstack-local-gateway-container"]
    assert sorted(f"/sandstack/{name}" for name in pids) == sorted(s.inputs["cgroupParent"] for s in limited)
    assert pids["sandstack-t_gateway"] == "512"
    assert cgroup_parent("sandstack-t-closed-0") == "/sandstack/sandstack-t-closed-0"


def test_networks_are_created_after_the_guard(built):
    guard = built.container("sandstack-local-guard-container")
    for net in built.mocks.by_type(NETWORK):
        assert net.request.dependencies == (guard.urn,), net.urn
    assert built.names(NETWORK) == ["sandstack-local-egress-net", "sandstack-local-net.closed",
                                    "sandstack-local-net.listed"]


def test_sandboxes_wait_for_the_guard_and_the_gateway_and_see_the_guard_state(built):
    # Each with the configuration that names the sandbox in force: their reload containers ended.
    guard = built.container("sandstack-local-guard-reload")
    gateway = built.container("sandstack-local-gateway-reload")
    for name in ("sandstack-closed.local-0", "sandstack-closed.local-1", "sandstack-listed.local-0"):
        c = built.container(name)
        assert {guard.urn, gateway.urn} <= set(c.request.dependencies), name
        assert c.inputs["mounts"][0] == {"type": "volume", "source": "sandstack-t_guard-state",
                                         "target": "/run/sandstack/guard", "readOnly": True}


def test_without_a_gateway_pool_sandboxes_wait_for_the_guard_only(build):
    built = build(spec({"closed": TEMPLATES["closed"]}))
    c = built.container("sandstack-closed.local-0")
    assert set(c.request.dependencies) == {built.reg(n).urn for n in (
        "sandstack-local-guard-reload", "sandstack-local-guard-state", "sandstack-closed.local-image",
        "sandstack-local-net.closed")}


def test_the_gateway_is_unprivileged_read_only_and_bounded(built):
    gateway = built.container("sandstack-local-gateway-container")
    inputs = {k: v for k, v in gateway.inputs.items() if k not in ("envs", "networksAdvanced")}
    joined = built.reg("sandstack-local-net.listed").urn
    assert inputs == {
        "name": "sandstack-t_gateway",
        "image": built.reg("sandstack-local-infra").outputs["imageId"],
        "user": "proxy",
        "command": ["sh", "-c", ENTRYPOINT],
        "init": True,
        # Docker's resolver in the gateway sends its lookups to the host's logging resolver for the gateway.
        "dns": ["10.213.48.1"],
        "capabilities": {"drops": ["ALL"]},
        "securityOpts": ["no-new-privileges:true"],
        "readOnly": True,
        "tmpfs": {"/tmp": "rw,nosuid,nodev,size=16m"},
        "mounts": [{"type": "volume", "source": "sandstack-t_gateway-log", "target": "/var/log/squid"},
                   {"type": "volume", "source": "sandstack-t_gateway-config", "target": "/run/sandstack/config"}],
        "memory": 256,
        "memorySwap": 256,
        "cpus": "1",
        "cgroupParent": "/sandstack/sandstack-t_gateway",
        "restart": "unless-stopped",
        "destroyGraceSeconds": 10,
        "healthcheck": {"tests": ["CMD", "squid", "-k", "check", "-f", "/tmp/squid.conf"], "interval": "2s",
                        "timeout": "2s", "retries": 5, "startPeriod": "1s"},
        # Healthy only once configured: `pulumi up` waits for its reload container instead.
        "wait": False,
        "logDriver": "json-file",
        "logOpts": {"max-size": "10m", "max-file": "5"},
        # Always the same text, depending on the pool networks its reload joins it to: one of them replaced renews it.
        "labels": LABELS + [{"label": "sandstack.role", "value": "gateway"},
                            {"label": "sandstack.joined", "value": "pool networks, joined by its reload container"}],
    }
    assert ("labels", (joined,)) in gateway.request.property_dependencies
    assert list(env_map(gateway)) == ["SANDSTACK_CONFIG_DIR"]
    assert gateway.request.replace_on_changes == HOST_REPLACE_ON_CHANGES
    assert built.reg("sandstack-local-gateway-log").request.delete_before_replace is True


def test_the_scripts_take_the_expiry_statuses_from_sandstack_instead_of_repeating_them():
    # The statuses are a contract (spec descriptions, README): the guard gets them in its environment, the
    # supervisor as arguments (exact wire inputs above and in test_sandbox_container.py); tests/assets run
    # both scripts with them and check what they do.
    import re

    from sandstack.plan.guard import GuardPlan
    from sandstack.components.sandbox_pool import SUPERVISOR_ENTRYPOINT
    from sandstack.plan.snapshot import SUPERVISOR_SOURCE
    from sandstack.spec.models.limits import EXIT_IDLE, EXIT_LIFETIME

    env = GuardPlan("t", (), (), (), ()).env
    assert env[1:3] == [f"SANDSTACK_EXIT_LIFETIME={EXIT_LIFETIME}", f"SANDSTACK_EXIT_IDLE={EXIT_IDLE}"]
    assert SUPERVISOR_ENTRYPOINT[1:3] == (f"--exit-lifetime={EXIT_LIFETIME}", f"--exit-idle={EXIT_IDLE}")
    for script in (GUARD_SCRIPT, SUPERVISOR_SOURCE.read_text()):
        assert not re.search(rf"\b({EXIT_LIFETIME}|{EXIT_IDLE})\b", script)
    # Nor the contract's paths and cgroup subtree: only comments name them.
    code = "\n".join(line for line in GUARD_SCRIPT.splitlines() if not line.lstrip().startswith("#"))
    assert not re.search(r"/host-cgroup|/state\b|/sandstack\b", code)
