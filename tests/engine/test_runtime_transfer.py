"""What leaves a sandbox through the runtime, on the real engine, against a sandbox that works against it: sparse
files against the declared download_limit and the pool's snapshot_storage (host disk measured), a zip of a
300 MiB sparse file against the runtime's 256 MiB memory, a sandbox forging the tar stream of its own archive and
snapshot (its own `tar` first on its PATH; writing into the runtime's tar's output), each file once in an archive,
an upload bigger than the workspace, a large upload streamed with nothing of it on the host, and processes that leave an exec's marker behind surviving its timeout."""

from __future__ import annotations

import io
import os
import tarfile
import threading
import time
import zipfile

import pytest
import yaml

from sandstack.client import Client, SandstackError
from testbed.deploy import engine_spec, shared_deployment
from testbed.waiting import wait_until
from tests.engine.runtime_helpers import answers, release_all
from tests.engine.sandbox_helpers import sh

pytestmark = pytest.mark.docker

PORT = 17520
TOKEN = "engine-test-runtime-token-transfer-01"
MIB = 1024 * 1024
STATE = "/var/lib/sandstack-runtime"  # the runtime's state volume, inside its container
FORGED = ("../../../../tmp/sandstack-forged", "/etc/cron.d/sandstack-forged")


def _spec(image: str) -> str:
    agent = {"base_image": image, "command": ["sleep", "infinity"], "limits": {"memory": "128MiB"},
             "workdir": "/workspace",
             # Programs may run from the workspace, and a workspace directory is first on the sandbox's PATH (like
             # ~/.local/bin): the sandbox can put its own `tar` there.
             "filesystem": {"writable": [{"path": "/workspace", "size": "16MiB", "exec": True},
                                         {"path": "/tmp", "size": "16MiB"}]},
             "env": {"PATH": "/workspace/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
             # The session's share is the whole pool's here: this module tests the pool's bound (test_runtime_bounds
             # tests the share).
             "session": {"idle": "never", "download_limit": "320MiB", "snapshot_storage": "40MiB",
                         "session_snapshot_storage": "40MiB"}}
    data = yaml.safe_load(engine_spec(image, {"agent": agent},
                                      {"agent": {"template": "agent", "hosts": ["local"], "replicas": 2}}))
    data["hosts"]["local"]["runtime"] = {"port": PORT, "token": {"secret": "runtimeToken"}}
    return yaml.safe_dump(data, sort_keys=False)


@pytest.fixture(scope="module")
def stack(debian_image, harness_sweep_orphans, tmp_path_factory):
    with shared_deployment(__file__, tmp_path_factory.mktemp("runtime-transfer"), _spec(debian_image),
                           secret_config={"runtimeToken": TOKEN}) as shared:
        yield shared


@pytest.fixture
def client(stack):
    c = Client.from_outputs({"hosts": {"local": {"url": f"http://127.0.0.1:{PORT}", "token": TOKEN}},
                             "pools": {"agent": ["local"]}}, actor="engine-test")
    yield c
    if answers(PORT):
        host = c.host("local")
        for snap in host.snapshots():
            host.delete_snapshot(snap["id"])
        release_all(host)
    c.close()


def _runtime(stack, docker_client):
    return docker_client.containers.get(stack.name("runtime"))


# Disk the runtime's process holds in files it has removed but keeps open (its spool files: tempfile unlinks them).
OPEN_UNLINKED = ("import os\nfds = [f'/proc/1/fd/{fd}' for fd in os.listdir('/proc/1/fd')]\n"
                 "print(sum(os.stat(f).st_blocks * 512 for f in fds if os.readlink(f).endswith(' (deleted)')))")


def _state_bytes(runtime) -> int:
    """Disk the runtime takes on the host: its state volume (snapshots, spool) and the spool files it has open."""
    stored = runtime.exec_run(["du", "-s", "-B1", STATE]).output.split()[0]
    spooled = runtime.exec_run(["python3", "-c", OPEN_UNLINKED]).output.split()[0]
    return int(stored) + int(spooled)


def _sampled(runtime, call):
    """(what `call` returned or raised, the most bytes the state volume held while it ran)."""
    peak, done = [_state_bytes(runtime)], threading.Event()

    def sample():
        while not done.is_set():
            peak.append(_state_bytes(runtime))
            time.sleep(0.1)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        outcome = call()
    except SandstackError as error:
        outcome = error
    finally:
        done.set()
        thread.join()
    return outcome, max(peak)


def _refused(call) -> SandstackError:
    with pytest.raises(SandstackError) as raised:
        call()
    return raised.value


def test_a_sparse_file_is_cut_off_at_the_download_limit_and_never_fills_the_host(stack, client, docker_client):
    runtime = _runtime(stack, docker_client)
    sandbox = client.claim("agent", "sparse")
    assert sandbox.exec(["truncate", "-s", "1G", "sparse.bin"])["exit_code"] == 0  # 1 GiB apparent, 0 on disk
    before = _state_bytes(runtime)

    started = time.monotonic()
    read, peak_read = _sampled(runtime, lambda: sandbox.read_file("sparse.bin"))
    archive, peak_archive = _sampled(runtime, lambda: sandbox.archive("tar.gz"))
    elapsed = time.monotonic() - started
    for refused in (read, archive):
        assert isinstance(refused, SandstackError) and refused.status == 413, refused
        assert f"passed the pool's download_limit of {320 * MIB} bytes (apparent size" in refused.message
    # Never spooled beyond the bound (320 MiB), then nothing left: today a read spooled 1 GiB, an archive 2 GiB.
    assert max(peak_read, peak_archive) - before <= 330 * MIB, (peak_read, peak_archive, before)
    assert _state_bytes(runtime) - before < MIB
    assert elapsed < 60
    print(f"measured: state volume peak +{peak_read - before} B (read), +{peak_archive - before} B (archive), "
          f"{elapsed:.1f}s for both")


def test_snapshots_are_bounded_by_the_pools_snapshot_storage(stack, client, docker_client):
    runtime = _runtime(stack, docker_client)
    sandbox = client.claim("agent", "storage")
    sandbox.exec(["truncate", "-s", "1G", "sparse.bin"])
    before = _state_bytes(runtime)
    sparse, peak = _sampled(runtime, sandbox.snapshot)
    # A sparse file is stored sparse (GNU tar's --sparse): its holes take nothing. It was refused at the 40 MiB bound
    # after filling it, and the 1 GiB file became a 1 GiB snapshot before the bound (8 GiB in the attack run).
    assert not isinstance(sparse, SandstackError) and sparse.info["size"] < MIB, sparse
    assert peak - before < MIB, (peak, before)
    print(f"measured: state volume peak +{peak - before} B for the snapshot of a 1 GiB sparse file "
          f"({sparse.info['size']} bytes)")
    client.host("local").delete_snapshot(sparse.id)

    sandbox.delete_file("sparse.bin")
    sandbox.exec(["sh", "-c", "head -c 12582912 /dev/urandom > data.bin"])  # 12 MiB that do not compress
    kept = [sandbox.snapshot() for _ in range(3)]  # 3 × 12 MiB of the 40 MiB
    full = _refused(sandbox.snapshot)
    assert full.status == 507 and "'s snapshot_storage of 41943040 bytes" in full.message
    (pool,) = client.host("local").pools()
    used = sum(snap.info["size"] for snap in kept)
    assert (pool["pool"], pool["snapshots"], pool["snapshot_bytes"], pool["snapshot_storage"]) == \
        ("agent", 3, used, 40 * MIB)
    assert 36 * MIB <= used < 37 * MIB
    client.host("local").delete_snapshot(kept[0].id)
    assert sandbox.snapshot().info["size"] < 13 * MIB  # room again once one is deleted


def test_a_zip_of_a_300_mib_sparse_file_streams_within_the_runtimes_memory(stack, client, docker_client):
    runtime = _runtime(stack, docker_client)
    started_at = runtime.attrs["State"]["StartedAt"]
    sandbox = client.claim("agent", "zip")
    sandbox.exec(["truncate", "-s", "300M", "sparse.bin"])
    packed = sandbox.archive("zip")  # today: the runtime (256 MiB) is OOM-killed reading the file whole
    with zipfile.ZipFile(io.BytesIO(packed)) as zf:
        (info,) = [i for i in zf.infolist() if i.filename == "sparse.bin"]
        assert info.file_size == 300 * MIB
        with zf.open(info) as data:
            assert sum(len(chunk) for chunk in iter(lambda: data.read(MIB), b"")) == 300 * MIB
    runtime.reload()
    assert runtime.attrs["State"]["StartedAt"] == started_at and not runtime.attrs["State"]["OOMKilled"]
    peak = _peak_rss(runtime)
    assert peak < 160 * MIB, peak  # the runtime's process at its largest since it started (VmHWM)
    print(f"measured: runtime peak RSS {peak} B, zip {len(packed)} B")


def _peak_rss(runtime) -> int:
    """The runtime process's peak resident memory (its /proc status' VmHWM), in bytes."""
    status = runtime.exec_run(["cat", "/proc/1/status"]).output.decode()
    (line,) = [line for line in status.splitlines() if line.startswith("VmHWM:")]
    return int(line.split()[1]) * 1024


def _forged_tar() -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name in FORGED:
            data = b"* * * * * root touch /tmp/pwned\n"
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def _names(packed: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz") as tar:
        return tar.getnames()


def test_a_tar_the_sandbox_puts_on_its_path_does_not_make_the_archive(stack, client):
    sandbox = client.claim("agent", "path-forger")
    sandbox.write_file("forged.tar", _forged_tar())
    sandbox.write_file("bin/tar", "#!/bin/sh\nexec cat /workspace/forged.tar\n")
    sandbox.exec(["chmod", "+x", "bin/tar"])
    assert sandbox.exec(["sh", "-c", "command -v tar"])["stdout"] == "/workspace/bin/tar\n"  # the sandbox's own
    names = _names(sandbox.archive("tar.gz"))
    assert sorted(names) == ["bin", "bin/tar", "forged.tar"]  # today: exactly the forged entries
    snap = sandbox.snapshot()
    sandbox.exec(["rm", "-rf", "bin", "forged.tar"])
    sandbox.restore(snap)
    assert sorted(e["name"] for e in sandbox.list_dir()) == ["bin", "forged.tar"]


# Runs in the sandbox as its user: stops each runtime tar script it sees (an exec's own process: no parent in the
# sandbox; its forked children carry the same command line) and, when it got there before the script's own tar had
# begun, writes a forged tar into its output first (so that the forgery is the stream). One line per script:
# 'early' (forged) or 'late' (let go: on a loaded machine the script can be quicker than this loop).
FORGER = r"""
import os, signal, time
forged = open("/tmp/forged.tar", "rb").read()
seen, deadline = set(), time.time() + 120
def children(pid):
    kids = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1] == pid:
                kids.append(open(f"/proc/{p}/cmdline", "rb").read())
        except (OSError, IndexError):
            pass
    return kids
while time.time() < deadline:
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid in seen:
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            root = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1] == "0"
        except (OSError, IndexError):
            continue
        if root and cmd.startswith(b"sh\0-c\0") and b"tar --help" in cmd:
            os.kill(int(pid), signal.SIGSTOP)
            seen.add(pid)
            early = not any(b"-cf" in kid or b"find" in kid for kid in children(pid))
            if early:
                with open(f"/proc/{pid}/fd/1", "wb") as out:
                    out.write(forged)
            os.kill(int(pid), signal.SIGCONT)
            print("early" if early else "late", flush=True)
"""


def _forged(container, call, tries: int = 10):
    """What `call` gave (or raised) the first time the forger got in first; what it gave when it did not must hold
    none of the forged entries either."""
    for _ in range(tries):
        done = len(sh(container, "cat /tmp/forger.log")[1].split())
        try:
            outcome = call()
        except SandstackError as error:
            outcome = error
        time.sleep(0.5)
        if "early" in sh(container, "cat /tmp/forger.log")[1].split()[done:]:
            return outcome
        assert isinstance(outcome, SandstackError) or not set(FORGED) & set(outcome), outcome
    pytest.fail("the forger never got in before the runtime's tar")


def test_a_sandbox_writing_into_the_runtimes_tar_cannot_forge_its_archive_or_snapshot(stack, client):
    sandbox = client.claim("agent", "stream-forger")
    container = stack.container("agent", int(sandbox.name.rsplit("-", 1)[1]))
    sandbox.write_file("forger.py", FORGER)
    sandbox.write_file("forged.tar", _forged_tar())
    assert sandbox.exec(["sh", "-c", "mv forged.tar /tmp/forged.tar"])["exit_code"] == 0
    pid = sh(container, "python3 /workspace/forger.py > /tmp/forger.log 2>&1 & echo $!")[1].strip()
    try:
        time.sleep(0.5)
        archive = _forged(container, lambda: _names(sandbox.archive("tar.gz")))
        snapshot = _forged(container, lambda: sandbox.snapshot().info["paths"])
    finally:
        sh(container, f"kill {pid}")
    # Today: the download held exactly the forged entries, and the snapshot stored them.
    for outcome in (archive, snapshot):
        assert isinstance(outcome, SandstackError) and outcome.status == 502, outcome
        assert "sent a stream that cannot be a tar of its workspace (entry '../../../../tmp/sandstack-forged' " \
               "is a .. path); nothing of it was kept" in outcome.message


def test_each_file_is_in_an_archive_and_a_snapshot_once(stack, client):
    sandbox = client.claim("agent", "once")
    sandbox.exec(["sh", "-c", "head -c 1048576 /dev/urandom > data.bin && mkdir d && echo x > d/x"])
    with tarfile.open(fileobj=io.BytesIO(sandbox.archive("tar.gz")), mode="r:gz") as tar:
        members = tar.getmembers()
    assert sorted(m.name for m in members) == ["d", "d/x", "data.bin"]  # today: each twice
    assert sum(m.size for m in members) == MIB + 2
    snap = sandbox.snapshot()
    assert MIB < snap.info["size"] < MIB + 64 * 1024  # today: 2 MiB and more
    print(f"measured: {len(members)} entries, {sum(m.size for m in members)} B in the tar.gz; snapshot "
          f"{snap.info['size']} B")


def test_an_upload_bigger_than_the_workspace_answers_no_space(stack, client):
    sandbox = client.claim("agent", "upload")
    refused = _refused(lambda: sandbox.write_file("big.bin", b"\0" * (20 * MIB)))  # 16 MiB tmpfs, 64 MiB limit
    assert refused.status == 507, refused  # today: 503 'the Docker daemon ... does not answer'
    assert refused.message.startswith("no space: writing 'big.bin' in sandbox ")
    assert "filled its filesystem at '/workspace' (16777216 bytes in all, 16777216 free after the partial file " \
           "was removed); nothing was written" in refused.message
    assert [e["name"] for e in sandbox.list_dir()] == []
    sandbox.write_file("small.bin", b"fits")  # the workspace works on
    assert sandbox.read_file("small.bin") == b"fits"


def test_a_large_upload_streams_into_the_sandbox_and_never_lands_on_the_host(stack, client, docker_client):
    runtime = _runtime(stack, docker_client)
    sandbox = client.claim("agent", "upload-large")
    data = os.urandom(14 * MIB)  # past the 8 MiB a spool would keep in memory: it would spill to the state volume
    before = _state_bytes(runtime)
    outcome, peak = _sampled(runtime, lambda: sandbox.write_file("out/big.bin", data))
    assert outcome is None, outcome
    assert peak - before < MIB, (before, peak)
    assert sandbox.read_file("out/big.bin") == data
    assert [e["name"] for e in sandbox.list_dir("out")] == ["big.bin"]  # no partial file left beside it
    # A second upload over it that does not fit leaves the first one whole (written beside it, then moved).
    refused = _refused(lambda: sandbox.write_file("out/big.bin", os.urandom(15 * MIB)))
    assert refused.status == 507, refused
    assert sandbox.read_file("out/big.bin") == data
    assert [e["name"] for e in sandbox.list_dir("out")] == ["big.bin"]


def test_the_clients_streamed_upload_and_download_move_a_file_whole_as_the_sandbox_user(stack, client, tmp_path):
    sandbox = client.claim("agent", "upload-files")
    data = os.urandom(9 * MIB + 17)
    source = tmp_path / "in.bin"
    source.write_bytes(data)
    sandbox.upload("files/in.bin", source)
    assert sandbox.exec(["stat", "-c", "%u %s", "files/in.bin"]).stdout == f"10001 {len(data)}\n"
    dest = tmp_path / "out.bin"
    dest.write_bytes(b"before")
    assert sandbox.download("files/in.bin", dest) == len(data)
    assert dest.read_bytes() == data
    # A download of what the sandbox's user may not read leaves the destination as it was, and no part file.
    sandbox.exec(["chmod", "000", "files/in.bin"], check=True)
    refused = _refused(lambda: sandbox.download("files/in.bin", dest))
    assert refused.status == 403, refused
    assert dest.read_bytes() == data and sorted(p.name for p in tmp_path.iterdir()) == ["in.bin", "out.bin"]


ESCAPES = {
    # The background sleep keeps the exec's output open: the exec runs into its timeout.
    "env -i, backgrounded": "env -i sh -c 'sleep 1001 &'",
    # Double fork, own session, no environment, output elsewhere; the command itself still runs at the timeout.
    "env -i, setsid, double fork": "env -i setsid sh -c '(sleep 1002 >/dev/null 2>&1 &)' ; sleep 1003",
    # The exec's own process replaced by one without the marker.
    "exec env -i": "exec env -i sh -c 'sleep 1004 & sleep 1005'",
}


def _sleepers(container) -> list[str]:
    script = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done | grep '^sleep 10' || true"
    return sorted(line.strip() for line in sh(container, script)[1].splitlines() if line.strip())


@pytest.mark.parametrize("escape", list(ESCAPES))
def test_a_timeout_ends_every_process_the_command_started(stack, client, escape):
    sandbox = client.claim("agent", "escape")
    container = stack.container("agent", int(sandbox.name.rsplit("-", 1)[1]))
    result = sandbox.exec(["sh", "-c", ESCAPES[escape]], timeout=2)
    assert result["timed_out"] and result["exit_code"] == 137
    # Killed at once, gone when the machine gets to them (a SIGKILLed process on a busy machine runs on until it is
    # scheduled): the wait is a bound on waiting only; today the processes without the marker lived on for good.
    wait_until(lambda: _sleepers(container) == [], 60, what=f"no sleeper of {escape!r} left")
    assert sandbox.status()["status"] == "bound" and sandbox.exec(["true"])["exit_code"] == 0
    # The sandbox's own command is not the exec's: it runs on.
    assert "sleep infinity" in sh(container, "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done")[1]
