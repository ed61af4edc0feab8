"""The runtime's bounds on the real engine (issue 34's runtime items): sparse files stay sparse in a snapshot and a
hibernation's copy on an image with GNU tar (Debian), and a hibernation of an image whose tar cannot store holes
(busybox) is refused at the path's declared size; a session's share of the pool's snapshot storage; a 3,000-level
directory is a 409 for an archive and a snapshot, and a 3,000-level path a 422 that makes nothing; a stdin write to a
process that does not read answers at once; a terminal's sizes are bounded (an error message, a 4422 close); the
session secrets' directory is 0700; an on-demand sandbox the guard ended at its lifetime is reported so."""

from __future__ import annotations

import time

import httpx
import pytest
import yaml
from httpx_ws import WebSocketDisconnect, connect_ws

from sandstack.client import SandstackError
from testbed.deploy import engine_spec, shared_deployment
from testbed.waiting import wait_until
from tests.engine.runtime_helpers import answers, local_client

pytestmark = pytest.mark.docker

PORT = 17541
TOKEN = "engine-test-runtime-token-bounds-0001"
MIB = 1024 * 1024
LIFETIME = 8  # seconds: the on-demand pool's max_lifetime
SLEEP = ["sh", "-c", "while true; do sleep 3600; done"]
DEEP = "import os\nfor _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')"


def _spec(debian: str, busybox: str) -> str:
    deb = {"base_image": debian, "command": SLEEP, "user": "10001:10001", "limits": {"memory": "128MiB"},
           "workdir": "/workspace",
           "filesystem": {"writable": [{"path": "/workspace", "size": "16MiB"}, {"path": "/tmp", "size": "16MiB"}]},
           "secrets": [{"secret": "poolToken", "path": "/run/secrets/token"}],
           "session": {"idle": "never", "download_limit": "64MiB", "snapshot_storage": "64MiB"}}
    box = {"base_image": busybox, "command": SLEEP, "limits": {"memory": "64MiB"}, "workdir": "/tmp",
           "filesystem": {"writable": [{"path": "/tmp", "size": "16MiB"}]},
           "session": {"idle": "never", "download_limit": "64MiB"}}
    short = {**deb, "lifecycle": {"max_lifetime": f"{LIFETIME}s", "on_expiry": "stop"}}
    pools = {"deb": {"template": "deb", "hosts": ["local"], "replicas": 2},
             "box": {"template": "box", "hosts": ["local"], "replicas": 1},
             "short": {"template": "short", "hosts": ["local"], "replicas": 0, "max": 1}}
    data = yaml.safe_load(engine_spec(debian, {"deb": deb, "box": box, "short": short}, pools))
    data["hosts"]["local"]["runtime"] = {"port": PORT, "token": {"secret": "runtimeToken"}}
    return yaml.safe_dump(data, sort_keys=False)


@pytest.fixture(scope="module")
def stack(debian_image, busybox_image, harness_sweep_orphans, tmp_path_factory):
    with shared_deployment(__file__, tmp_path_factory.mktemp("runtime-bounds"), _spec(debian_image, busybox_image),
                           secret_config={"runtimeToken": TOKEN, "poolToken": "pool-token-value"}) as shared:
        yield shared


@pytest.fixture
def client(stack):
    with local_client(PORT, TOKEN, ["deb", "box", "short"], timeout=120) as c:
        yield c
        if answers(PORT):
            for snap in c.host("local").snapshots():
                c.host("local").delete_snapshot(snap["id"])


def _sh(sandbox, script: str) -> str:
    result = sandbox.exec(["sh", "-c", script])
    assert result["exit_code"] == 0, result
    return result["stdout"]


def _pool(client, name: str) -> dict:
    return {p["pool"]: p for p in client.host("local").pools()}[name]


def test_a_sparse_file_stays_sparse_in_a_snapshot_and_a_hibernation_on_gnu_tar(stack, client):
    sandbox = client.claim("deb", "sparse")
    _sh(sandbox, "truncate -s 900M big.img && printf 'the end' | dd of=big.img bs=1 seek=943718393 conv=notrunc "
                 "2>/dev/null && truncate -s 1000000000 /tmp/big.img")
    snap = sandbox.snapshot()
    assert snap.info["size"] < MIB, snap.info  # 900 MiB apparent, 7 bytes of data
    _sh(sandbox, "rm big.img")
    sandbox.restore(snap.id)
    assert _sh(sandbox, "stat -c '%s %b' big.img; tail -c 7 big.img") == "943718400 8\nthe end"
    assert sandbox.hibernate()["status"] == "hibernated"
    pool = _pool(client, "deb")
    assert 0 < pool["hibernated_bytes"] < MIB, pool  # the 1,000 MB file of the 16 MiB /tmp: a 1 GB copy before
    assert _sh(sandbox, "stat -c '%s %b' /tmp/big.img") == "1000000000 0\n"  # resumed by the call, sparse again
    assert _pool(client, "deb")["hibernated_bytes"] == 0


def test_busybox_cannot_store_holes_and_its_hibernation_is_refused_at_the_paths_size(stack, client, busybox_image):
    sandbox = client.claim("box", "busybox")
    _sh(sandbox, "dd if=/dev/zero of=/tmp/big.img bs=1 count=0 seek=1000000000 2>/dev/null")
    refused = pytest.raises(SandstackError, sandbox.hibernate).value
    assert (refused.status, refused.message) == (
        409, f"hibernating sandbox {sandbox.name!r}: the files at '/tmp' take more than the path's declared size of "
             f"{16 * MIB} bytes (a sparse file counts at its full length where the sandbox's tar cannot store holes, "
             "as busybox's cannot); it was not hibernated")
    assert sandbox.status()["status"] == "bound"
    assert _sh(sandbox, "ls /tmp") == "big.img\n"  # nothing changed
    assert _pool(client, "box")["hibernated_bytes"] == 0


def test_a_session_takes_at_most_its_share_of_the_pools_snapshot_storage(stack, client):
    first = client.claim("deb", "share-1")  # the pool's 64 MiB over its 2 sandboxes: 32 MiB each
    _sh(first, "head -c 12582912 /dev/urandom > data.bin")
    first.snapshot()
    first.snapshot()
    cut = pytest.raises(SandstackError, first.snapshot).value
    assert cut.status == 507 and "of session 'share-1''s share of pool 'deb''s snapshot_storage (33554432 bytes" \
        in cut.message, cut.message
    second = client.claim("deb", "share-2")
    _sh(second, "head -c 12582912 /dev/urandom > data.bin")
    assert second.snapshot().info["size"] > 12 * MIB  # the first did not fill the pool for it


def test_deep_paths_are_bounded_with_a_4xx_and_make_nothing(stack, client):
    sandbox = client.claim("deb", "deep")
    refused = pytest.raises(SandstackError, sandbox.write_file, "/".join(["d"] * 3000) + "/f", b"x").value
    assert refused.status == 422 and refused.message.endswith("has 3001 levels and 6001 bytes; a path may have at "
                                                              "most 1024 levels and 4095 bytes"), refused.message
    assert _sh(sandbox, "ls -A") == ""
    made = sandbox.exec(["python3", "-c", DEEP])
    assert made["exit_code"] == 0, made
    for call in (lambda: sandbox.archive("tar.gz"), sandbox.snapshot):
        started = time.monotonic()
        refused = pytest.raises(SandstackError, call).value
        assert refused.status == 409 and "(1025 levels, 2049 bytes) is deeper or longer than a copy takes (at most " \
            "1024 levels and 4095 bytes); nothing of it was kept" in refused.message, refused.message
        print(f"measured: refused in {time.monotonic() - started:.2f}s (held a thread past 40s before)")
    assert client.host("local").snapshots() == []
    _sh(sandbox, "rm -rf d")


def test_a_stdin_write_to_a_process_that_does_not_read_answers_at_once(stack, client):
    sandbox = client.claim("deb", "stdin")
    proc = sandbox.start(["sh", "-c", "while [ ! -e go ]; do sleep 0.05; done; cat > got.bin"], stdin=True)
    started = time.monotonic()
    proc.write_stdin(b"x" * MIB)
    print(f"measured: a 1 MiB write to a process not reading answered in {time.monotonic() - started:.2f}s "
          f"({proc.info.stdin_pending} bytes held; it took 30 s, then 504)")
    assert proc.info.stdin_pending > 0
    _sh(sandbox, "touch go")
    proc.close_stdin()
    assert proc.wait(60).exit_code == 0
    assert _sh(sandbox, "stat -c %s got.bin") == f"{MIB}\n"


def test_a_terminals_sizes_are_bounded(stack, client):
    sandbox = client.claim("deb", "term")
    with sandbox.terminal(rows=24, cols=80, command=["sh", "-i"]) as term:
        term._ws.send_text('{"type": "resize", "rows": Infinity, "cols": 80}')
        term.send("stty size\n")
        term.read_until("24 80\r\n", timeout=60)
        assert term.screen.errors == ["resize: rows inf is not an integer 1-1000; the terminal keeps its size"]
    with httpx.Client(base_url=f"http://127.0.0.1:{PORT}", headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        with pytest.raises(WebSocketDisconnect) as closed:
            with connect_ws(f"/v1/sandboxes/{sandbox.name}/terminal", http, params={"rows": "0"}) as ws:
                ws.receive(timeout=30)
    assert (closed.value.code, closed.value.reason) == (4422, "query rows '0' is not an integer 1-1000")


def test_the_session_secrets_directory_is_the_users_alone(stack, client):
    sandbox = client.claim("deb", "secrets", secrets={"files": {"key": "value"}})
    assert _sh(sandbox, "stat -c '%a %u:%g' /run/secrets/session") == "700 10001:10001\n"  # it was 755


def test_an_on_demand_sandbox_the_guard_ended_at_its_lifetime_is_reported_so(stack, client):
    sandbox = client.claim("short", "brief")
    # The guard ends it at its lifetime (exit 124); Docker's restart policy runs it again and its supervisor ends each
    # retry at once. The monitor (every 5 s) reports it, then retires the place: the reason is kept.
    wait_until(lambda: client.host("local").status(sandbox.name)["status"] == "absent", 120,
               what="the expired on-demand sandbox to be retired")
    detail = client.host("local").status(sandbox.name)["detail"]
    assert detail == ("its max lifetime was reached (exit 124) while bound to session 'brief': the host guard ended "
                      "it, and the session with it"), detail
