"""Run-scoped secret files and early readiness on the real engine (docs/design/ondemand.md): a claim's files are
in /run/secrets/session (0400, the sandbox's user, a tmpfs inside the pool's read-only secrets volume, whose own
files stay readable and read-only); a released session's files are absent for the next session, on a warm
sandbox and on an on-demand one; a resume is ready long before Docker's first scheduled health check (the
template's probe interval is 30 s here), because the runtime runs the probe itself."""

from __future__ import annotations

import time

import pytest
import yaml

from testbed.deploy import engine_spec, shared_deployment
from tests.engine.runtime_helpers import local_client
from tests.engine.sandbox_helpers import docker_time

pytestmark = pytest.mark.docker

PORT = 17536
TOKEN = "engine-test-runtime-token-secretfiles-1"
POOL_SECRET = "pool-file-value-4e1a"
SESSION_SECRET = "session-file-value-" + "7c2d" * 4
DIR = "/run/secrets/session"
INTERVAL = 30  # seconds: Docker's first health check comes this long after a start


def _spec(image: str) -> str:
    template = {"base_image": image, "command": ["sleep", "infinity"], "user": "10001:10001",
                "limits": {"memory": "64MiB"}, "workdir": "/workspace",
                "readiness": {"command": ["true"], "interval": f"{INTERVAL}s"},
                "filesystem": {"writable": [{"path": "/workspace", "size": "8MiB"}]},
                "secrets": [{"secret": "poolToken", "path": "/run/secrets/token"}],
                "session": {"idle": "never"}}
    data = yaml.safe_load(engine_spec(image, {"sf": template}, {"sf": {"template": "sf", "hosts": ["local"],
                                                                      "replicas": 1, "max": 2}}))
    data["hosts"]["local"]["runtime"] = {"port": PORT, "token": {"secret": "runtimeToken"}}
    return yaml.safe_dump(data, sort_keys=False)


@pytest.fixture(scope="module")
def stack(debian_image, harness_sweep_orphans, tmp_path_factory):
    with shared_deployment(__file__, tmp_path_factory.mktemp("runtime-secret-files"), _spec(debian_image),
                           secret_config={"runtimeToken": TOKEN, "poolToken": POOL_SECRET}) as shared:
        yield shared


@pytest.fixture
def client(stack):
    with local_client(PORT, TOKEN, ["sf"], timeout=120) as c:
        yield c


def _sh(sandbox, script: str) -> str:
    result = sandbox.exec(["sh", "-c", script])
    assert result["exit_code"] == 0, result
    return result["stdout"]


def test_a_claims_files_are_0400_the_users_and_gone_for_the_next_session(stack, client):
    warm = client.claim("sf", "first", secrets={"files": {"api-key": SESSION_SECRET}})
    assert warm.name == stack.name("sf", "0")
    assert _sh(warm, f"stat -c '%a %u:%g' {DIR}/api-key; cat {DIR}/api-key") == f"400 10001:10001\n{SESSION_SECRET}"
    assert _sh(warm, "cat /run/secrets/token") == POOL_SECRET  # the pool's own file, beside it
    mounts = _sh(warm, f"awk '$2 == \"/run/secrets\" || $2 == \"{DIR}\" {{print $2, $3, $4}}' /proc/mounts")
    options = {line.split()[0]: (line.split()[1], line.split()[2].split(",")[0]) for line in mounts.splitlines()}
    assert options == {"/run/secrets": (options["/run/secrets"][0], "ro"), DIR: ("tmpfs", "rw")}
    # A second session takes the on-demand place with its own files; each sees only its own.
    extra = client.claim("sf", "second", secrets={"files": {"other": "x"}})
    assert extra.name == stack.name("sf", "1")
    assert _sh(extra, f"ls -A {DIR}") == "other\n"
    assert warm.release()["status"] == "idle"
    assert extra.release()["status"] == "absent"
    for session in ("third", "fourth"):  # the warm sandbox again, then the on-demand place made again
        nxt = client.claim("sf", session)
        assert _sh(nxt, f"ls -A {DIR}") == ""
    assert client.host("local").get_session("third")["sandbox"] == warm.name


def test_a_resume_is_ready_before_dockers_first_check_and_gets_its_files_back(stack, client, docker_client):
    sandbox = client.claim("sf", "sleepy", secrets={"files": {"api-key": SESSION_SECRET}})
    sandbox.write_file("notes.txt", "kept")
    assert sandbox.hibernate()["status"] == "hibernated"
    assert sandbox.resume()["status"] == "bound"
    answered = time.time()
    # Ready by the runtime's own run of the probe, not by Docker's scheduled check (INTERVAL s after the start):
    # when the resume answered, Docker had recorded no passing check of this run (its log keeps earlier runs'
    # checks). Docker's own record, not the resume's duration, which a busy machine stretches.
    state = docker_client.containers.get(sandbox.name).attrs["State"]
    this_run = [r for r in state["Health"]["Log"] if docker_time(r["Start"]) >= docker_time(state["StartedAt"])]
    passed_before = [r for r in this_run if r["ExitCode"] == 0 and docker_time(r["End"]) <= answered]
    assert not passed_before, f"the resume waited for Docker's scheduled check: {state['Health']}"
    assert _sh(sandbox, f"cat notes.txt {DIR}/api-key") == "kept" + SESSION_SECRET
