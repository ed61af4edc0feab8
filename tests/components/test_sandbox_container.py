"""The secure defaults of a sandbox container, as exact pulumi-docker wire inputs, and each loosening."""

from __future__ import annotations

import pytest

from sandstack.plan.snapshot import SUPERVISOR_PATH
from tests.components.helpers import env_map, label_map, role_config
from testbed.specs import changed, host, spec

MiB = 1024**2
BASE = {
    "base_image": "busybox:1.36",
    "command": ["sh", "-c", "sleep 1d"],
    "limits": {"cpus": 1.5, "memory": "512MiB", "disk": "1GiB", "pids": 100},
    "lifecycle": {"max_lifetime": "2h", "idle_timeout": "10m"},
    "filesystem": {"writable": [{"path": "/tmp", "size": "64MiB"}, {"path": "/work", "size": "128MiB"}]},
}
# The fields declared to force a replace (readiness → healthcheck, writable paths → tmpfs), then the plan's own.
REPLACE_ON_CHANGES = ("healthcheck", "tmpfs", "init", "wait", "waitTimeout", "destroyGraceSeconds")
# The supervisor is given the documented expiry statuses and the guard's state mount (tests/assets run it).
SUPERVISOR = [SUPERVISOR_PATH, "--exit-lifetime=124", "--exit-idle=123", "--guard-state=/run/sandstack/guard", "--"]


def _sandbox(build, template: dict, **spec_extra):
    built = build(spec({"t": template}, **spec_extra))
    return built, built.container("sandstack-t.local-0")


def test_a_sandbox_container_has_exactly_the_secure_defaults(build):
    built, c = _sandbox(build, BASE)
    image = built.reg("sandstack-t.local-image")
    digest = image.inputs["triggers"]["digest"]
    assert c.inputs == {
        "name": "sandstack-t-t-0",
        "hostname": "t-0",
        "image": image.outputs["imageId"],
        "user": "10001:10001",
        "entrypoints": SUPERVISOR,
        "command": ["sh", "-c", "sleep 1d"],
        "init": True,
        "envs": [],
        "labels": [
            {"label": "sandstack.host", "value": "local"},
            {"label": "sandstack.managed-by", "value": "pulumi"},
            {"label": "sandstack.stack", "value": "t"},
            {"label": "sandstack.role", "value": "sandbox"},
            {"label": "sandstack.template", "value": "t"},
            {"label": "sandstack.version", "value": ""},
            {"label": "sandstack.digest", "value": digest},
            {"label": "sandstack.pool", "value": "t"},
            {"label": "sandstack.replica", "value": "0"},
            {"label": "sandstack.subnet", "value": "10.213.234.0/23"},
        ],
        "networksAdvanced": [{"name": "sandstack-t-t"}],
        "ports": [],
        "readOnly": True,
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,noexec,size={64 * MiB},mode=1777",
                  "/work": f"rw,nosuid,nodev,noexec,size={128 * MiB},mode=1777",
                  # A claim's secret files (sandstack.plan.sandbox `session_secrets_tmpfs`): the user's alone.
                  "/run/secrets/session": f"rw,nosuid,nodev,noexec,size={4 * MiB},mode=0700,uid=10001,gid=10001"},
        "shmSize": 16,
        "mounts": [{"type": "volume", "source": "sandstack-t_guard-state", "target": "/run/sandstack/guard",
                    "readOnly": True}],
        "capabilities": {"drops": ["ALL"]},
        "securityOpts": ["no-new-privileges:true"],
        "privileged": False,
        "runtime": "runc",
        "memory": 512,
        "memorySwap": 512,
        "cpus": "1.5",
        "ulimits": [{"name": "nofile", "soft": 1024, "hard": 1024}],
        "cgroupParent": "/sandstack/sandstack-t-t-0",
        "wait": False,
        "restart": "on-failure",
        "maxRetryCount": 3,
        "destroyGraceSeconds": 10,
        "logDriver": "json-file",
        "logOpts": {"max-size": "10m", "max-file": "3"},
    }
    assert c.request.replace_on_changes == REPLACE_ON_CHANGES
    assert c.secret_paths == frozenset()
    # What the provider would send the daemon: bytes, NanoCpus, no swap beyond memory, no socket mount.
    assert (c.plan.host["Memory"], c.plan.host["MemorySwap"]) == (512 * MiB, 512 * MiB)
    assert c.plan.host["NanoCpus"] == 1_500_000_000
    assert c.plan.host["CapDrop"] == ["ALL"] and c.plan.host["CapAdd"] == []
    assert "PortBindings" not in c.plan.host
    assert all("docker.sock" not in m["Source"] for m in c.plan.host["Mounts"])


def test_labels_carry_template_version_digest_pool_host_and_the_hosts_own_labels(build):
    template = {**BASE, "snapshot": {"version": "7"}}
    hosts = {"local": host(labels={"zone": "eu-1a"})}
    built, c = _sandbox(build, template, hosts=hosts)
    labels = label_map(c)
    assert labels["zone"] == "eu-1a"
    assert (labels["sandstack.template"], labels["sandstack.version"], labels["sandstack.pool"],
            labels["sandstack.host"]) == ("t", "7", "t", "local")
    assert labels["sandstack.digest"] == built.reg("sandstack-t.local-image").inputs["triggers"]["digest"]
    assert c.plan.config["Labels"] == labels


@pytest.mark.parametrize("on_expiry, restart", [("stop", "on-failure"), ("restart", "unless-stopped")])
def test_restart_policy_follows_on_expiry(build, on_expiry, restart):
    _, c = _sandbox(build, changed(BASE, "lifecycle.on_expiry", on_expiry))
    assert c.inputs["restart"] == restart
    # Crashes of a 'stop' sandbox are retried a bounded number of times; 'restart' ones always come back.
    assert c.inputs.get("maxRetryCount") == (3 if on_expiry == "stop" else None)


def test_lifetimes_go_to_the_guard_not_the_supervisor(build):
    result, c = _sandbox(build, {**BASE, "lifecycle": {"max_lifetime": "90m"}})
    assert c.inputs["entrypoints"] == SUPERVISOR
    guard_env = role_config(result, "guard")
    assert guard_env["SANDSTACK_LIFECYCLE"] == "sandstack-t-t-0 5400 0 stop 20000 0"


def test_a_readiness_probe_raises_the_idle_threshold_by_its_budget(build):
    template = {**BASE, "lifecycle": {"idle_timeout": "10m", "on_expiry": "restart"},
                "readiness": {"command": ["true"], "interval": "4s"}}
    result, _ = _sandbox(build, template)
    guard_env = role_config(result, "guard")
    # 20 ms/s of its own, plus a 100 ms probe budget spread over the 4 s interval, and one run's worth.
    assert guard_env["SANDSTACK_LIFECYCLE"] == "sandstack-t-t-0 86400 600 restart 45000 100000"


def test_loosenings_show_up_exactly(build):
    template = {**BASE, "runtime": "runsc",
                "security": {"capabilities": ["NET_BIND_SERVICE", "SYS_PTRACE"], "privileged": True,
                             "no_new_privileges": False}}
    _, c = _sandbox(build, template)
    assert c.inputs["capabilities"] == {"drops": ["ALL"], "adds": ["NET_BIND_SERVICE", "SYS_PTRACE"]}
    assert c.inputs["privileged"] is True
    assert c.inputs["runtime"] == "runsc"
    assert "securityOpts" not in c.inputs
    assert (c.plan.host["Privileged"], c.plan.host["Runtime"]) == (True, "runsc")


def test_capabilities_added_for_a_root_sandbox_show_up_exactly(build):
    template = {**BASE, "user": "0:0", "security": {"capabilities": ["CHOWN"]}}
    _, c = _sandbox(build, template)
    assert c.inputs["capabilities"] == {"drops": ["ALL"], "adds": ["CHOWN"]}
    assert (c.inputs["user"], c.inputs["privileged"], c.inputs["securityOpts"]) == (
        "0:0", False, ["no-new-privileges:true"])


def test_a_writable_root_on_a_quota_host_is_capped_at_limits_disk(build):
    template = {**BASE, "user": "1000:1000", "workdir": "/work",
                "filesystem": {"read_only_root": False, "writable": [{"path": "/work", "size": "128MiB"}]}}
    _, c = _sandbox(build, template, hosts={"local": host(storage_quota=True)})
    assert (c.inputs["readOnly"], c.inputs["user"], c.inputs["workingDir"]) == (False, "1000:1000", "/work")
    # The working directory's tmpfs is the user's (Docker would leave it 0755 root when the image lacks it).
    assert c.inputs["tmpfs"] == {"/work": f"rw,nosuid,nodev,noexec,size={128 * MiB},mode=1777,uid=1000,gid=1000",
                                 "/run/secrets/session": f"rw,nosuid,nodev,noexec,size={4 * MiB},mode=0700,uid=1000,"
                                                         "gid=1000"}
    assert c.inputs["storageOpts"] == {"size": str(1024 * MiB)}
    assert c.plan.host["StorageOpt"] == {"size": str(1024 * MiB)}


def test_a_read_only_root_sets_no_storage_quota_even_on_a_quota_host(build):
    _, c = _sandbox(build, BASE, hosts={"local": host(storage_quota=True)})
    assert "storageOpts" not in c.inputs


def test_entrypoint_and_command_run_under_the_supervisor(build):
    _, c = _sandbox(build, {**BASE, "entrypoint": ["/bin/agent"], "command": ["--serve", "8000"]})
    assert c.inputs["entrypoints"] == SUPERVISOR
    assert c.inputs["command"] == ["/bin/agent", "--serve", "8000"]


def test_no_command_leaves_the_image_default_out(build):
    template = {k: v for k, v in BASE.items() if k != "command"}
    _, c = _sandbox(build, template)
    assert "command" not in c.inputs


def test_readiness_becomes_a_healthcheck_and_a_bounded_wait(build):
    template = {**BASE, "readiness": {"command": ["test", "-f", "/tmp/ready"], "interval": "5s", "timeout": "2s",
                                      "retries": 4, "start_period": "10s"}}
    _, c = _sandbox(build, template)
    assert c.inputs["healthcheck"] == {"tests": ["CMD", "test", "-f", "/tmp/ready"], "interval": "5s",
                                       "timeout": "2s", "retries": 4, "startPeriod": "10s"}
    assert (c.inputs["wait"], c.inputs["waitTimeout"]) == (True, 10 + (4 + 2) * (5 + 2) + 30)


def test_env_merges_defaults_under_the_templates_own(build):
    template = {**BASE, "env": {"LOG_LEVEL": "debug", "B": "2"}}
    _, c = _sandbox(build, template, defaults={"env": {"LOG_LEVEL": "info", "A": "1"}})
    assert c.inputs["envs"] == ["A=1", "B=2", "LOG_LEVEL=debug"]
    assert env_map(c) == {"A": "1", "B": "2", "LOG_LEVEL": "debug"}


def test_fractional_cpus_and_memory_in_whole_megabytes(build):
    template = changed(changed(BASE, "limits.cpus", 0.25), "limits.memory", "1536MiB")
    _, c = _sandbox(build, template)
    assert (c.inputs["cpus"], c.inputs["memory"], c.inputs["memorySwap"]) == ("0.25", 1536, 1536)
    assert c.plan.host["NanoCpus"] == 250_000_000


def test_a_gpu_request_becomes_device_requests_for_the_hosts_devices_of_that_model(build):
    """A host with two models: each replica gets its own devices of the requested model, by id."""
    hosts = {"local": host(capacity={"cpus": 64, "memory": "256GiB", "disk": "1TiB", "gpus": [
        {"type": "nvidia-a100", "count": 2}, {"type": "nvidia-l4", "count": 4, "ids": ["GPU-aaaa1111", "GPU-bbbb2222",
                                                                                  "GPU-cccc3333", "GPU-dddd4444"]}]})}
    l4 = changed(BASE, "limits.gpus", {"count": 2, "type": "nvidia-l4"})
    a100 = changed(BASE, "limits.gpus", {"count": 1, "type": "nvidia-a100"})
    built = build(spec({"l4": l4, "a100": a100}, hosts=hosts,
                       pools={"l4": {"template": "l4", "hosts": ["local"], "replicas": 2},
                              "a100": {"template": "a100", "hosts": ["local"], "replicas": 2}}))

    def requests(name: str) -> list:
        return built.container(name).inputs["deviceRequests"]

    assert requests("sandstack-l4.local-0") == [{"driver": "nvidia", "deviceIds": ["GPU-aaaa1111", "GPU-bbbb2222"],
                                                 "capabilities": ["gpu"]}]
    assert requests("sandstack-l4.local-1") == [{"driver": "nvidia", "deviceIds": ["GPU-cccc3333", "GPU-dddd4444"],
                                                 "capabilities": ["gpu"]}]
    # Undeclared ids are indexes in declaration order: the a100s are devices 0 and 1.
    assert [requests(f"sandstack-a100.local-{i}")[0]["deviceIds"] for i in (0, 1)] == [["0"], ["1"]]
    c = built.container("sandstack-l4.local-0")
    assert c.plan.host["DeviceRequests"] == [{"Driver": "nvidia", "Count": 0, "DeviceIDs": ["GPU-aaaa1111", "GPU-bbbb2222"],
                                              "Capabilities": [["gpu"]]}]


def test_no_gpu_request_sends_no_device_requests(build):
    _, c = _sandbox(build, BASE)
    assert "deviceRequests" not in c.inputs and "gpus" not in c.inputs


def test_every_replica_gets_its_own_name_hostname_cgroup_parent_and_replica_label(build):
    built = build(spec({"t": BASE}, pools={"t": {"template": "t", "hosts": ["local"], "replicas": 3}}))
    for i in range(3):
        c = built.container(f"sandstack-t.local-{i}")
        assert (c.inputs["name"], c.inputs["hostname"], c.inputs["cgroupParent"]) == (
            f"sandstack-t-t-{i}", f"t-{i}", f"/sandstack/sandstack-t-t-{i}")
        assert label_map(c)["sandstack.replica"] == str(i)
