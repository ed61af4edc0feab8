"""On-demand sandboxes and hibernation on the real engine (docs/design/ondemand.md): a claim past the warm sandbox
creates one with the warm one's settings, a claim at the ceiling is refused naming pool, host and ceiling, a release
retires it, a runtime killed with one bound finds it again, a runtime stopped and started hibernates it and the next
call makes it again with its files, hibernation stops a warm sandbox (its memory freed) and resumes it with its
files, also after a restart of the runtime; and `pulumi destroy` leaves nothing of them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sandstack.client import NoCapacity
from sandstack.plan.recipe import LABEL_ONDEMAND, LABEL_RECIPE
from sandstack.plan.contract import LABEL_REPLICA
from testbed.deploy import engine_spec, shared_deployment
from testbed.waiting import wait_until
from tests.engine.runtime_helpers import answers, local_client

pytestmark = pytest.mark.docker

PORT = 17533
TOKEN = "engine-test-runtime-token-ondemand-1"
# What a sandbox's settings are, as Docker reports them: an on-demand one must match the warm one's.
HOST_CONFIG = ("Memory", "MemorySwap", "NanoCpus", "ReadonlyRootfs", "CapAdd", "CapDrop", "SecurityOpt", "Tmpfs",
               "ShmSize", "Ulimits", "RestartPolicy", "Init", "Privileged", "Runtime", "LogConfig", "Dns")


def _spec(image: str) -> str:
    template = {"base_image": image, "command": ["sleep", "infinity"],
                "limits": {"memory": "256MiB", "cpus": 0.5, "pids": 64, "disk": "256MiB"},
                "readiness": {"command": ["true"], "interval": "1s"},
                "lifecycle": {"max_lifetime": "1h"},
                "filesystem": {"writable": [{"path": "/workspace", "size": "8MiB"},
                                            {"path": "/data", "type": "disk", "size": "16MiB"}]},
                "workdir": "/workspace", "session": {"idle": "never"}}
    data = yaml.safe_load(engine_spec(image, {"od": template}, {"od": {"template": "od", "hosts": ["local"],
                                                                      "replicas": 1, "max": 2}}))
    data["hosts"]["local"]["runtime"] = {"port": PORT, "token": {"secret": "runtimeToken"}}
    data["hosts"]["local"]["disk_workspaces"] = "1GiB"
    return yaml.safe_dump(data, sort_keys=False)


@pytest.fixture(scope="module")
def stack(debian_image, harness_sweep_orphans, tmp_path_factory, docker_client):
    with shared_deployment(__file__, tmp_path_factory.mktemp("runtime-ondemand"), _spec(debian_image),
                           secret_config={"runtimeToken": TOKEN}) as shared:
        yield shared
    # `pulumi destroy` (the teardown) deleted the runtime first; its stop removed the on-demand sandboxes.
    left = docker_client.containers.list(all=True, filters={"label": [f"{LABEL_ONDEMAND}=true",
                                                                      f"sandstack.stack={shared.stack}"]})
    for container in left:  # never leave anything for the next test, even when the assertion fails
        container.remove(force=True)
    assert [c.name for c in left] == [], "on-demand sandboxes outlived `pulumi destroy`"


@pytest.fixture
def client(stack):
    with local_client(PORT, TOKEN, ["od"], timeout=120) as c:
        yield c


def _restart_runtime(stack, docker_client, *, kill: bool) -> None:
    runtime = docker_client.containers.get(stack.name("runtime"))
    if kill:
        runtime.kill()  # no stop handler runs: what a crash leaves
        runtime.start()
    else:
        runtime.restart(timeout=60)
    wait_until(lambda: answers(PORT), 60, what="the runtime to answer again")


def test_a_claim_past_the_warm_sandbox_creates_one_with_the_warm_ones_settings(stack, client, docker_client):
    warm = client.claim("od", "first")
    extra = client.claim("od", "second")
    assert (warm.name, extra.name) == (stack.name("od", "0"), stack.name("od", "1"))
    a, b = (docker_client.containers.get(s.name).attrs for s in (warm, extra))
    assert {k: b["HostConfig"][k] for k in HOST_CONFIG} == {k: a["HostConfig"][k] for k in HOST_CONFIG}
    assert b["HostConfig"]["CgroupParent"] == a["HostConfig"]["CgroupParent"].replace(warm.name, extra.name)
    assert list(b["NetworkSettings"]["Networks"]) == list(a["NetworkSettings"]["Networks"])
    assert sorted(m["Destination"] for m in b["Mounts"]) == sorted(m["Destination"] for m in a["Mounts"])
    assert b["Image"] == a["Image"]  # the snapshot image (the warm one names it by id, the recipe by its tag)
    assert b["Config"]["Healthcheck"] == a["Config"]["Healthcheck"]
    own = {LABEL_ONDEMAND, LABEL_RECIPE, LABEL_REPLICA}
    assert {k: v for k, v in b["Config"]["Labels"].items() if k not in own and not k.startswith("sandstack.harness")} \
        == {k: v for k, v in a["Config"]["Labels"].items() if k not in own and not k.startswith("sandstack.harness")}
    assert extra.exec(["sh", "-c", "echo ok > /data/f && cat /data/f"])["stdout"] == "ok\n"
    # The guard holds its pids limit on its cgroup parent, as a warm one's (it registered the place by name).
    wait_until(lambda: _pids_max(b) == _pids_max(a) == "64", 15, what="the guard's pids limit on both")


def _pids_max(attrs: dict) -> str | None:
    parent = attrs["HostConfig"]["CgroupParent"]
    for path in (Path(f"/sys/fs/cgroup/pids{parent}/pids.max"), Path(f"/sys/fs/cgroup{parent}/pids.max")):
        if path.exists():
            return path.read_text().strip()
    return None


def test_a_claim_at_the_ceiling_is_refused_naming_pool_host_and_ceiling(stack, client):
    client.claim("od", "one")
    client.claim("od", "two")
    with pytest.raises(NoCapacity) as refused:
        client.claim("od", "three")
    assert ("no capacity: pool 'od' on host 'local' is at its ceiling of 2 sandboxes (1 warm, 1 on demand), none "
            "idle") in str(refused.value)


def test_a_release_retires_the_on_demand_sandbox(stack, client, docker_client):
    client.claim("od", "one")
    extra = client.claim("od", "two")
    extra.write_file("left.txt", "x")
    extra.exec(["sh", "-c", "echo x > /data/left"])
    assert extra.release()["status"] == "absent"
    assert docker_client.containers.list(all=True, filters={"name": f"^{extra.name}$"}) == []
    extra_disk = extra.name
    again = client.claim("od", "two-again")  # "one" holds the warm one: the place is made anew
    assert again.name == extra_disk
    # Nothing of the last session: a new tmpfs, and the disk workspace emptied before the container was removed.
    assert again.exec(["ls", "-A", "/workspace", "/data"])["stdout"] == "/data:\nlost+found\n\n/workspace:\n"


def test_a_killed_runtime_finds_its_bound_on_demand_sandbox_again(stack, client, docker_client):
    client.claim("od", "one")
    extra = client.claim("od", "two")
    extra.write_file("kept.txt", "kept")
    _restart_runtime(stack, docker_client, kill=True)
    assert client.host("local").get_session("two")["status"] == "bound"
    assert extra.read_file("kept.txt") == b"kept"


def test_a_stopped_runtime_hibernates_on_demand_sandboxes_and_the_next_call_brings_them_back(stack, client,
                                                                                             docker_client):
    client.claim("od", "one")
    extra = client.claim("od", "two")
    extra.write_file("kept.txt", "kept")
    extra.exec(["sh", "-c", "echo disk > /data/d"])
    _restart_runtime(stack, docker_client, kill=False)
    assert client.host("local").get_session("two")["status"] == "hibernated"
    assert extra.exec(["cat", "/workspace/kept.txt", "/data/d"])["stdout"] == "keptdisk\n"


def test_hibernate_frees_the_memory_and_resume_keeps_the_files_also_after_a_runtime_restart(stack, client,
                                                                                          docker_client):
    warm = client.claim("od", "one")
    warm.write_file("notes.txt", "mine")
    warm.exec(["sh", "-c", "echo disk > /data/d; nohup python3 -c 'x = bytearray(48 * 2**20); import time; "
                           "time.sleep(10**6)' >/dev/null 2>&1 &"])
    wait_until(lambda: docker_client.api.stats(warm.name, stream=False)["memory_stats"]["usage"] > 48 * 1024 * 1024,
               15, what="the sandbox to hold 48 MiB")
    assert warm.hibernate()["status"] == "hibernated"
    assert docker_client.containers.get(warm.name).status == "exited"  # no process, no memory
    _restart_runtime(stack, docker_client, kill=False)
    assert client.host("local").get_session("one")["status"] == "hibernated"
    assert warm.resume()["status"] == "bound"
    assert warm.exec(["cat", "notes.txt", "/data/d"])["stdout"] == "minedisk\n"
