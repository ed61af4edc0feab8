"""What leaves a sandbox, on the fake backend and in tarcheck alone: the download bound on reads, archives and
snapshots, the pool's snapshot storage, each file once, archive streams checked entry by entry, a zip written in
chunks, and which processes a timed-out exec's kill selects."""

from __future__ import annotations

import dataclasses
import errno
import io
import os
import subprocess
import tarfile
import tracemalloc
import zipfile

import pytest

from sandstack.plan.snapshot import SUPERVISOR_PATH
from sandstack.runtime import scripts
from sandstack.runtime.tarcheck import Checked, Forged, PastBound, write_tar, write_zip
from tests.runtime.conftest import make_config, make_env

MIB = 1024 * 1024


def _env(tmp_path, **pool):
    config = make_config()
    pools = {**config.pools, "py": dataclasses.replace(config.pools["py"], **pool)}
    environment = make_env(tmp_path, dataclasses.replace(config, pools=pools))
    return environment, environment.claim("chat-1")["sandbox"]


@pytest.fixture
def bounded(tmp_path):
    environment, sandbox = _env(tmp_path, download_limit_bytes=64 * 1024, snapshot_storage_bytes=100 * 1024)
    yield environment, sandbox
    environment.backend.close()
    environment.audit.close()


def test_a_read_and_an_archive_past_the_download_limit_are_413_and_leave_nothing_spooled(bounded):
    env, sandbox = bounded
    with open(env.backend.path(sandbox, "/workspace") / "sparse.bin", "wb") as f:
        f.truncate(1024 * MIB)  # 1 GiB apparent, nothing on disk
    limit = "passed the pool's download_limit of 65536 bytes (apparent size: a sparse file counts at its full " \
            "length); it was stopped there and nothing was kept"
    read = env.api.get(f"/v1/sandboxes/{sandbox}/files/sparse.bin")
    assert (read.status_code, read.json()["error"]) == (413, f"reading 'sparse.bin' {limit}")
    archive = env.api.get(f"/v1/sandboxes/{sandbox}/archive")
    assert (archive.status_code, archive.json()["error"]) == (413, f"the archive of '/workspace' {limit}")
    assert list((env.state_dir / "spool").iterdir()) == []


def test_snapshots_take_no_more_than_the_pools_snapshot_storage(bounded):
    env, sandbox = bounded
    (env.backend.path(sandbox, "/workspace") / "data.bin").write_bytes(os.urandom(20 * 1024))
    sizes = [env.api.post(f"/v1/sandboxes/{sandbox}/snapshots").json()["size"] for _ in range(2)]
    cut = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots")
    used = sum(sizes)
    assert (cut.status_code, cut.json()["error"]) == (
        507, f"the snapshot of sandbox {sandbox!r} passed the {100 * 1024 - used} bytes left of pool 'py''s "
             f"snapshot_storage of 102400 bytes ({used} used on host 'local'); it was stopped there and nothing was "
             "kept")
    pools = {p["pool"]: p for p in env.api.get("/v1/pools").json()}
    assert pools["py"] == {"pool": "py", "host": "local", "sandboxes": {"bound": 1, "idle": 3}, "snapshots": 2,
                           "snapshot_bytes": used, "hibernated_bytes": 0, "snapshot_storage": 102400,
                           "session_snapshot_storage": None, "download_limit": 65536, "upload_limit": 1024,
                           "sizes": {}}
    assert sorted(p.name for p in (env.state_dir / "snapshots").iterdir()) == \
        sorted(s["id"] for s in env.api.get("/v1/snapshots").json())


def test_an_archive_holds_each_file_once(env):
    sandbox = env.claim("chat-1")["sandbox"]
    (env.backend.path(sandbox, "/workspace") / "a.txt").write_bytes(b"A" * 1000)
    packed = env.api.get(f"/v1/sandboxes/{sandbox}/archive")
    with tarfile.open(fileobj=io.BytesIO(packed.content), mode="r:gz") as tar:
        assert [(m.name, m.size) for m in tar] == [("a.txt", 1000)]  # was twice: a second tar ran after the first


def _tar(*members: tuple[str, bytes | str | None, bytes]) -> io.BytesIO:
    """A tar of (name, type, data or link target)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                info.linkname = data.decode()
                tar.addfile(info)
            elif kind == tarfile.REGTYPE:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    raw.seek(0)
    return raw


def _relayed(raw: io.BytesIO, limit: int = MIB) -> tuple[list[tuple[str, str]], list[str]]:
    out = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="r|") as tar:
        entries = Checked(tar, limit)
        write_tar(entries, out)
    out.seek(0)
    with tarfile.open(fileobj=out, mode="r") as tar:
        return [(m.name, m.linkname) for m in tar], entries.left_out


def test_only_what_a_workspace_can_hold_is_relayed():
    kept, left_out = _relayed(_tar(
        ("./d", tarfile.DIRTYPE, b""), ("./d/f", tarfile.REGTYPE, b"data"),
        ("./in", tarfile.SYMTYPE, b"d/f"), ("./d/up", tarfile.SYMTYPE, b"../d"),
        ("./hard", tarfile.LNKTYPE, b"d/f"),
        ("./abs", tarfile.SYMTYPE, b"/etc/passwd"), ("./out", tarfile.SYMTYPE, b"../../etc"),
        ("./stray", tarfile.LNKTYPE, b"etc/shadow"), ("./fifo", tarfile.FIFOTYPE, b""),
        ("./dev", tarfile.CHRTYPE, b"")))
    assert kept == [("d", ""), ("d/f", ""), ("in", "d/f"), ("d/up", "../d"), ("hard", "d/f")]
    assert left_out == ["abs", "out", "stray", "fifo", "dev"]


@pytest.mark.parametrize(("name", "why"), [
    ("/etc/cron.d/evil", "an absolute path"), ("../../../../tmp/evil", "a .. path"), ("a/../../evil", "a .. path")])
def test_a_forged_entry_fails_the_whole_stream(name, why):
    with pytest.raises(Forged, match=rf"entry '{name}' is {why}"):
        _relayed(_tar(("ok", tarfile.REGTYPE, b"x"), (name, tarfile.REGTYPE, b"* * * * * root sh\n")))


def test_an_entry_under_a_symlink_of_the_stream_is_a_forgery():
    with pytest.raises(Forged, match="entry 'link/evil' lies under a symlink of the same stream"):
        _relayed(_tar(("link", tarfile.SYMTYPE, b"."), ("link/evil", tarfile.REGTYPE, b"x")))


def test_the_sizes_count_against_the_bound():
    with pytest.raises(PastBound):
        _relayed(_tar(("a", tarfile.REGTYPE, b"x" * 600), ("b", tarfile.REGTYPE, b"y" * 600)), limit=1000)


def test_a_zip_is_written_in_chunks_never_a_whole_file_in_memory(tmp_path):
    big = tmp_path / "big.tar"
    with tarfile.open(big, "w") as tar:
        info = tarfile.TarInfo("zeros.bin")
        info.size = 64 * MIB
        with open("/dev/zero", "rb") as zeros:
            tar.addfile(info, zeros)
    tracemalloc.start()
    with open(big, "rb") as raw, tarfile.open(fileobj=raw, mode="r|") as tar, open(tmp_path / "out.zip", "wb") as out:
        write_zip(Checked(tar, 128 * MIB), out)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 8 * MIB, peak  # was the whole 64 MiB (zipfile.writestr of extractfile().read())
    with zipfile.ZipFile(tmp_path / "out.zip") as zf:
        assert zf.getinfo("zeros.bin").file_size == 64 * MIB


def _select(table: str, since: str) -> list[str]:
    run = subprocess.run(["awk", "-v", f"since={since}", scripts.SELECT_EXEC], input=table, capture_output=True,
                         text=True, check=True)
    return sorted(run.stdout.split(), key=int)


TABLE = """1 0 100 none
7 1 100 none
8 7 150 none
20 0 500 ours
21 20 510 none
22 1 520 none
23 22 530 none
30 0 505 other
31 30 515 none
32 1 525 other
40 0 502 none
41 40 503 none
50 0 600 self
51 50 601 none
"""


def test_a_timeout_selects_every_process_the_exec_started_and_only_those():
    # 20: the exec (its marker); 21: its child without the marker (env -i); 22, 23: double-forked to PID 1 since
    # it began, and their child; 40, 41: an exec's own process that dropped the marker (exec env -i). Never: PID 1,
    # the sandbox's command (7, 8, older), another exec (30, 31, 32) or the kill itself (50, 51).
    assert _select(TABLE, "500") == ["20", "21", "22", "23", "40", "41"]
    # Outside a sandbox's PID namespace there is no start time to go by: the marker and descent only.
    assert _select(TABLE, "") == ["20", "21"]


def test_the_kill_knows_the_sandboxes_init():
    assert scripts.SANDBOX_INIT == SUPERVISOR_PATH


def test_a_link_climbing_after_a_name_is_left_out_and_a_directory_never_becomes_a_link():
    # 'a' -> '.', then 'a/b/../..' reads '.' by its letters but leads out of the tree through the link.
    kept, left_out = _relayed(_tar(("a", tarfile.SYMTYPE, b"."), ("s", tarfile.SYMTYPE, b"a/b/../.."),
                                   ("d/e", tarfile.SYMTYPE, b"../../x/../.."), ("d/f", tarfile.SYMTYPE, b"../a")))
    assert (kept, left_out) == ([("a", "."), ("d/f", "../a")], ["s", "d/e"])
    with pytest.raises(Forged, match="entry 'd' turns a directory of the same stream into a symlink"):
        _relayed(_tar(("d/x", tarfile.REGTYPE, b"x"), ("d", tarfile.SYMTYPE, b"/etc")))


def test_a_full_state_volume_is_507_not_a_server_error(env, monkeypatch):
    sandbox = env.claim("chat-1")["sandbox"]
    (env.backend.path(sandbox, "/workspace") / "a.txt").write_bytes(b"A")

    class Full(io.BytesIO):
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(env.runtime.transfers, "spool", Full)
    full = "the runtime's state volume on host 'local' is full"
    upload = env.api.put(f"/v1/sandboxes/{sandbox}/files/b.txt", content=b"B")  # streamed too: no spool
    assert (upload.status_code, (env.backend.path(sandbox, "/workspace") / "b.txt").read_bytes()) == (204, b"B")
    read = env.api.get(f"/v1/sandboxes/{sandbox}/files/a.txt")  # streamed, never spooled: the volume is not used
    assert (read.status_code, read.content) == (200, b"A")
    archive = env.api.get(f"/v1/sandboxes/{sandbox}/archive")
    assert (archive.status_code, archive.json()["error"]) == (507, f"archiving: {full}")
