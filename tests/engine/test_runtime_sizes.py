"""Size classes on the real engine (docs/design/sizes.md): a claim of class `large` gets the class's memory and pids
inside its sandbox (the cgroup v1 files it sees: memory.limit_in_bytes, pids.max) and CPUs (Docker's NanoCpus); after
its release the warm sandbox has the pool's own limits again; an unknown class is a 422 that leaves the pool idle."""

from __future__ import annotations

import pytest
import yaml

from sandstack.client import InvalidRequest
from testbed.deploy import engine_spec, shared_deployment
from tests.engine.runtime_helpers import local_client

pytestmark = pytest.mark.docker

PORT = 17551
TOKEN = "engine-test-runtime-token-sizes-0001"
MIB = 1024 * 1024
CGROUP = "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max"


def _spec(image: str) -> str:
    template = {"base_image": image, "command": ["sleep", "infinity"],
                "limits": {"memory": "256MiB", "cpus": 0.5, "pids": 64},
                "readiness": {"command": ["true"], "interval": "1s"},
                "lifecycle": {"max_lifetime": "1h"}, "session": {"idle": "never"}}
    pools = {"sized": {"template": "sized", "hosts": ["local"], "replicas": 1,
                       "sizes": {"large": {"cpus": 1, "memory": "512MiB", "pids": 256}}}}
    data = yaml.safe_load(engine_spec(image, {"sized": template}, pools))
    data["hosts"]["local"]["runtime"] = {"port": PORT, "token": {"secret": "runtimeToken"}}
    return yaml.safe_dump(data, sort_keys=False)


@pytest.fixture(scope="module")
def stack(debian_image, harness_sweep_orphans, tmp_path_factory):
    with shared_deployment(__file__, tmp_path_factory.mktemp("runtime-sizes"), _spec(debian_image),
                           secret_config={"runtimeToken": TOKEN}) as shared:
        yield shared


@pytest.fixture
def client(stack):
    with local_client(PORT, TOKEN, ["sized"], timeout=120) as c:
        yield c


def _limits(docker_client, name: str) -> tuple[int, int, int, list[str]]:
    """(Memory, NanoCpus, PidsLimit) as Docker holds them, and the cgroup files as the sandbox reads them."""
    container = docker_client.containers.get(name)
    host = container.attrs["HostConfig"]
    seen = container.exec_run(["sh", "-c", CGROUP]).output.decode().split()
    return host["Memory"], host["NanoCpus"], host["PidsLimit"], seen


def test_a_large_claim_gets_the_class_inside_its_sandbox_and_its_release_restores_the_pools(stack, client,
                                                                                           docker_client):
    sandbox = client.claim("sized", "big-1", size="large")
    assert (sandbox.name, sandbox.info["size"]) == (stack.name("sized", "0"), "large")
    inside = sandbox.exec(["sh", "-c", CGROUP])
    assert (inside["exit_code"], inside["stdout"].split()) == (0, [str(512 * MIB), "256"])
    assert _limits(docker_client, sandbox.name) == (512 * MIB, 1_000_000_000, 256, [str(512 * MIB), "256"])
    client.host("local").release("big-1")
    assert _limits(docker_client, sandbox.name) == (256 * MIB, 500_000_000, 64, [str(256 * MIB), "64"])
    # A claim naming no class runs at the pool's own limits too (its pids under the guard's largest, 256).
    plain = client.claim("sized", "plain-1")
    assert plain.exec(["sh", "-c", CGROUP])["stdout"].split() == [str(256 * MIB), "64"]


def test_an_unknown_class_is_422_naming_the_classes_and_leaves_the_pool_idle(stack, client):
    with pytest.raises(InvalidRequest) as refused:
        client.claim("sized", "huge-1", size="huge")
    assert refused.value.message == ("pool 'sized' has no size class 'huge': its classes are large (or name none for "
                                     "the pool's own limits)")
    assert [(s["status"], s["session"]) for s in client.host("local").sandboxes()] == [("idle", None)]
