"""The sandbox runtime on the real engine, deployed by the components and driven through `sandstack.client`:
a session's whole life (claim, exec, files, archive, snapshot, restore, branch, pause, resume, release), idempotent
and concurrent claims against the declared capacity, bad input, timeouts, tokens, a restart of the runtime, and the
runtime out of reach of every sandbox."""

from __future__ import annotations

import io
import subprocess
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import yaml

from sandstack.client import Client, SandstackError
from testbed.deploy import engine_spec, shared_deployment
from tests.engine.net.probes import template
from tests.engine.runtime_helpers import answers, release_all
from tests.engine.sandbox_helpers import sh
from testbed.waiting import wait_until

pytestmark = pytest.mark.docker

PORT = 17480
TOKEN = "engine-test-runtime-token-0123456789"
WORK = {"path": "/workspace", "size": "16MiB"}


def _spec(image: str) -> str:
    agent = {"base_image": image, "command": ["sleep", "infinity"], "limits": {"memory": "128MiB"},
             "workdir": "/workspace", "filesystem": {"writable": [WORK, {"path": "/tmp", "size": "8MiB"}]},
             "session": {"idle": "never"}}
    data = yaml.safe_load(engine_spec(image, {
        "agent": agent,
        # One sandbox per egress mode, to prove the runtime is out of reach from each.
        "listed": {**template(image, {"egress": "allow-list", "allow": ["internet.test"]}), "session": {"idle": "never"}},
        "open": {**template(image, {"egress": "allow-all", "log": False}), "session": {"idle": "never"}},
        "logged": {**template(image, {"egress": "allow-all"}), "session": {"idle": "never"}},
        "anyproto": {**template(image, {"egress": "allow-all", "protocols": "any"}), "session": {"idle": "never"}},
    }, {"agent": {"template": "agent", "hosts": ["local"], "replicas": 4},
        **{p: {"template": p, "hosts": ["local"], "replicas": 1} for p in ("listed", "open", "logged", "anyproto")}}))
    # Public, so that every address of the host would answer but for the guard.
    data["hosts"]["local"]["runtime"] = {"port": PORT, "exposure": "public", "token": {"secret": "runtimeToken"}}
    return yaml.safe_dump(data, sort_keys=False)


@pytest.fixture(scope="module")
def stack(debian_image, harness_sweep_orphans, tmp_path_factory):
    with shared_deployment(__file__, tmp_path_factory.mktemp("runtime"), _spec(debian_image),
                           secret_config={"runtimeToken": TOKEN}) as shared:
        yield shared


@pytest.fixture
def client(stack):
    outputs = stack.result.outputs["runtime"]
    assert outputs["hosts"]["local"]["url"] == f"http://localhost:{PORT}"
    with_loopback = {"hosts": {"local": {**outputs["hosts"]["local"], "url": f"http://127.0.0.1:{PORT}"}},
                     "pools": outputs["pools"]}
    c = Client.from_outputs(with_loopback, actor="engine-test")
    yield c
    release_all(c.host("local"))
    c.close()


def test_a_session_from_claim_to_release(stack, client):
    stack.proves("Container.networkMode", "Container.envs", "Container.mounts.type")
    first = client.claim("agent", "chat-1")
    assert first.pool == "agent" and first.name.startswith(stack.name("agent", ""))
    assert client.claim("agent", "chat-1").name == first.name  # idempotent: a chat resumes its own sandbox

    result = first.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result["stdout"], result["stderr"], result["exit_code"]) == ("out\n", "err\n", 3)
    assert result["duration_ms"] >= 0

    first.write_file("notes/plan.md", "step 1\n")
    assert first.read_file("notes/plan.md") == b"step 1\n"
    assert first.exec(["cat", "/workspace/notes/plan.md"])["stdout"] == "step 1\n"
    first.write_file("scratch.txt", "x")
    first.delete_file("scratch.txt")
    with tarfile.open(fileobj=io.BytesIO(first.archive("tar.gz")), mode="r:gz") as archive:
        names = archive.getnames()
    assert any(n.endswith("notes/plan.md") for n in names) and not any(n.endswith("scratch.txt") for n in names)

    snap = first.snapshot()
    first.write_file("notes/plan.md", "step 2\n")
    first.write_file("extra.txt", "new")
    first.restore(snap)
    assert first.read_file("notes/plan.md") == b"step 1\n"
    assert first.exec(["ls", "/workspace"])["stdout"].split() == ["notes"]

    # Branch: a second session starts from the snapshot, in its own sandbox.
    branch = client.claim("agent", "chat-1-branch", from_snapshot=snap)
    assert branch.name != first.name
    assert branch.read_file("notes/plan.md") == b"step 1\n"

    # Pause freezes a running process: its counter does not move while paused.
    first.exec(["sh", "-c", "nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done' "
                            ">/dev/null 2>&1 &"])
    count = lambda: int(first.exec(["cat", "/tmp/count"])["stdout"] or 0)  # noqa: E731
    wait_until(lambda: count() > 3, 60, what="the counter to run")
    first.pause()
    assert first.status()["status"] == "paused"
    before = int(stack.container("agent", int(first.name.rsplit("-", 1)[1])).attrs["State"]["Paused"])
    time.sleep(1.5)
    first.resume()
    # Running again after the resume: the counter moves on (how fast is the machine's business, not this test's).
    resumed = count()
    assert before == 1
    wait_until(lambda: count() >= resumed + 5, 60, what="the counter to run on after the resume")

    # Release resets: the next session gets a sandbox with none of this session's files.
    name = first.name
    first.release()
    branch.release()
    again = [client.claim("agent", f"chat-2-{i}") for i in range(4)]
    reused = next(s for s in again if s.name == name)
    assert reused.exec(["sh", "-c", "ls -A /workspace /tmp"])["stdout"].split() == ["/tmp:", "/workspace:"]


def test_claims_never_exceed_the_declared_capacity(client):
    def claim(i: int):
        try:
            return client.host("local").claim("agent", f"burst-{i}")
        except SandstackError as error:
            return error

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(claim, range(20)))
    bound = [r for r in results if isinstance(r, dict)]
    refused = [r for r in results if isinstance(r, SandstackError)]
    assert len(bound) == 4 and len({r["sandbox"] for r in bound}) == 4
    assert len(refused) == 16 and {r.status for r in refused} == {503}
    assert all("agent" in r.message and "local" in r.message for r in refused), refused[0].message


def test_bad_input_is_refused_with_its_status(client):
    sandbox = client.claim("agent", "bad-input")
    for path in ("../etc/passwd", "/etc/passwd", "a/../../etc/passwd"):
        with pytest.raises(SandstackError) as refused:
            sandbox.read_file(path)
        assert refused.value.status == 403, path
    sandbox.exec(["ln", "-s", "/etc", "/workspace/out"])
    with pytest.raises(SandstackError) as refused:
        sandbox.read_file("out/passwd")
    assert refused.value.status == 403
    with pytest.raises(SandstackError) as refused:
        sandbox.write_file("big.bin", b"x" * (64 * 1024 * 1024 + 1))
    assert refused.value.status == 413
    with pytest.raises(SandstackError) as refused:
        client.claim("nosuch", "s")
    assert refused.value.status == 404
    with pytest.raises(SandstackError) as refused:
        client.host("local").status("sandstack-nosuch-0")
    assert refused.value.status == 404 and "sandstack-nosuch-0" in refused.value.message

    result = sandbox.exec(["sh", "-c", "sleep 31 & sleep 31"], timeout=1)
    # Ended by its timeout (the runtime's own record: timed out, killed, not before the second was up), not
    # by the command, which would have run 31 s; how fast the machine killed it is no concern of this test.
    assert (result["timed_out"], result["exit_code"], result["message"]) == (
        True, 137, "timed out after 1s: every process the command started was killed (SIGKILL)"), result
    assert result["duration_ms"] >= 1000, result
    # Every process the command started is gone (killed at once; reaped by the sandbox's init a moment later).
    wait_until(lambda: sandbox.exec(["sh", "-c", "pgrep -f 'sleep 3[1]' || echo none"])["stdout"].strip() == "none",
               60, what="the timed-out command's processes to be gone")

    wrong = httpx.get(f"http://127.0.0.1:{PORT}/v1/sandboxes", headers={"Authorization": "Bearer wrong-token-xxxxxx"})
    assert (wrong.status_code, wrong.json()) == (401, {"error": "unauthorized"})


def test_sessions_and_snapshots_survive_a_restart_of_the_runtime(stack, client, docker_client):
    sandbox = client.claim("agent", "long-chat")
    sandbox.write_file("keep.txt", "kept")
    snap = sandbox.snapshot()
    docker_client.containers.get(stack.name("runtime")).restart(timeout=5)
    wait_until(lambda: answers(PORT), 30, what="the runtime to answer again")
    assert client.claim("agent", "long-chat").name == sandbox.name
    assert snap.id in {s["id"] for s in client.host("local").snapshots()}
    assert sandbox.read_file("keep.txt") == b"kept"


def _host_addresses() -> list[str]:
    """This machine's own IPv4 addresses other than loopback, from its interfaces."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout
    return [line.split()[3].split("/")[0] for line in out.splitlines() if " lo " not in line]


# deny-all, allow-list, unlogged allow-all, logged allow-all (through the gateway), any protocol (logged, direct).
@pytest.mark.parametrize("pool", ["agent", "listed", "open", "logged", "anyproto"])
def test_no_sandbox_of_any_egress_mode_reaches_the_runtime(stack, pool):
    sandbox = stack.container(pool, 0)
    gateway = sandbox.attrs["NetworkSettings"]["Networks"][stack.name(pool)]["Gateway"]
    targets = sorted({gateway, *_host_addresses()} - {""})
    assert answers(PORT)  # control: it answers on the host
    # Every address at once (a dropped connection answers only by its 2 s timeout: one after another they took 16 s).
    probe = ("import socket, sys, threading\ndef one(host):\n    s = socket.socket(); s.settimeout(2)\n    try:\n"
             f"        s.connect((host, {PORT})); print(host, 'connected', flush=True)\n"
             "    except OSError as e:\n        print(host, type(e).__name__, flush=True)\n"
             "ts = [threading.Thread(target=one, args=(h,)) for h in sys.argv[1:]]\n"
             "[t.start() for t in ts]; [t.join() for t in ts]\n")
    code, out = sh(sandbox, "python3 -c \"" + probe + "\" " + " ".join(targets))
    assert code == 0 and "connected" not in out and len(out.splitlines()) == len(targets), out
