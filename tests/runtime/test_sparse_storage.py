"""Snapshots and hibernation copies on the host's disk (issue 34, items 10 and 11): sparse files stay sparse, a copy
of a tmpfs path never holds more data than the path's declared size, hibernation copies count toward the pool's
snapshot_storage, each session has its share of it, and a resume that fails leaves a stated, consistent state."""

from __future__ import annotations

import dataclasses
import io
import os
import tarfile

import pytest

from sandstack.runtime.tarcheck import Checked, Forged, write_tar
from tests.runtime.conftest import hk, make_config, make_env

MIB = 1024 * 1024


def _env(tmp_path, **pool):
    config = make_config()
    pools = {**config.pools, "py": dataclasses.replace(config.pools["py"], **pool)}
    environment = make_env(tmp_path, dataclasses.replace(config, pools=pools))
    environment.backend.tmpfs_size = {"/workspace": 16 * MIB, "/tmp": 16 * MIB}  # as Docker made the tmpfs
    return environment


@pytest.fixture
def small(tmp_path):
    environment = _env(tmp_path, download_limit_bytes=64 * MIB)
    yield environment
    environment.backend.close()
    environment.audit.close()


def _sparse(path, length: int, data: bytes) -> None:
    """A file of `length` bytes holding only `data`, at its end: the rest is a hole."""
    with open(path, "wb") as out:
        out.truncate(length)
        out.seek(length - len(data))
        out.write(data)


def _allocated(path) -> int:
    return os.stat(path).st_blocks * 512


def test_a_snapshot_keeps_a_sparse_file_sparse_and_its_restore_brings_it_back_sparse(small):
    """9 snapshots of a 900 MiB sparse file in a 16 MiB workspace took 9 × 900 MiB; one took more than a 64 MiB
    download_limit (413). A snapshot stores its data only, and the restore makes it sparse again."""
    env = small
    sandbox = env.claim("chat-1")["sandbox"]
    big = env.backend.path(sandbox, "/workspace") / "big.img"
    _sparse(big, 900 * MIB, b"the end")
    taken = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots")
    assert taken.status_code == 201, taken.json()
    assert taken.json()["size"] < MIB
    with tarfile.open(env.state_dir / "snapshots" / taken.json()["id"] / "0.tar") as stored:
        member = stored.getmember("big.img")
        assert (member.issparse(), member.size) == (True, 900 * MIB)
    big.unlink()
    restored = env.api.post(f"/v1/sandboxes/{sandbox}/restore", json={"snapshot": taken.json()["id"]})
    assert restored.status_code == 200, restored.json()
    assert os.path.getsize(big) == 900 * MIB and _allocated(big) < MIB
    with open(big, "rb") as back:
        back.seek(900 * MIB - 7)
        assert back.read() == b"the end"


def test_an_archive_still_counts_a_sparse_file_at_its_full_length(small):
    """The user's archive is not a copy the runtime keeps: its tar stores every byte, so the download_limit holds."""
    env = small
    sandbox = env.claim("chat-1")["sandbox"]
    _sparse(env.backend.path(sandbox, "/workspace") / "big.img", 900 * MIB, b"x")
    assert env.api.get(f"/v1/sandboxes/{sandbox}/archive").status_code == 413


def test_each_session_takes_at_most_its_share_of_the_pools_snapshot_storage(tmp_path):
    env = _env(tmp_path, snapshot_storage_bytes=300 * 1024, session_snapshot_storage_bytes=100 * 1024)
    first = env.claim("chat-1")["sandbox"]
    (env.backend.path(first, "/workspace") / "data.bin").write_bytes(os.urandom(25 * 1024))
    sizes = [env.api.post(f"/v1/sandboxes/{first}/snapshots").json()["size"] for _ in range(2)]
    cut = env.api.post(f"/v1/sandboxes/{first}/snapshots")
    used = sum(sizes)
    assert (cut.status_code, cut.json()["error"]) == (
        507, f"the snapshot of sandbox {first!r} passed the {100 * 1024 - used} bytes left of session 'chat-1''s share "
             f"of pool 'py''s snapshot_storage (102400 bytes: session.session_snapshot_storage; {used} used on host "
             "'local'); it was stopped there and nothing was kept")
    # Another session of the pool has its own share: the first one cannot fill the pool for it.
    second = env.claim("chat-2")["sandbox"]
    (env.backend.path(second, "/workspace") / "data.bin").write_bytes(os.urandom(25 * 1024))
    assert env.api.post(f"/v1/sandboxes/{second}/snapshots").status_code == 201
    env.backend.close()
    env.audit.close()


def test_a_hibernation_copies_a_sparse_file_sparse_counts_it_and_the_resume_brings_it_back(small):
    """A 16 MiB /tmp holding a 1,000 MB sparse file hibernated into a 1 GB tar, counted nowhere (the pool showed 40 KB
    of storage)."""
    env = small
    sandbox = env.claim("chat-1")["sandbox"]
    big = env.backend.path(sandbox, "/tmp") / "big.img"
    _sparse(big, 1000 * 1000 * 1000, b"still here")
    hibernated = env.api.post("/v1/sessions/chat-1/hibernate")
    assert (hibernated.status_code, hibernated.json()["status"]) == (200, "hibernated"), hibernated.json()
    copied = sum(f.stat().st_size for f in (env.state_dir / "hibernated" / sandbox).iterdir())
    assert 0 < copied < MIB
    pool = {p["pool"]: p for p in env.api.get("/v1/pools").json()}["py"]
    assert (pool["hibernated_bytes"], pool["snapshot_bytes"]) == (copied, 0)
    answer = env.api.post(f"/v1/sandboxes/{sandbox}/exec", json={"script": "tail -c 10 /dev/null"})
    assert answer.status_code == 200  # the call resumed it
    assert os.path.getsize(big) == 1000 * 1000 * 1000 and _allocated(big) < MIB
    with open(big, "rb") as back:
        back.seek(1000 * 1000 * 1000 - 10)
        assert back.read() == b"still here"
    assert env.api.get("/v1/pools").json()[0]["hibernated_bytes"] == 0  # let go once it is back


def test_a_hibernation_copy_is_never_more_than_the_paths_declared_size(small):
    env = small
    sandbox = env.claim("chat-1")["sandbox"]
    (env.backend.path(sandbox, "/tmp") / "full.bin").write_bytes(b"x" * (17 * MIB))  # past the 16 MiB tmpfs
    refused = env.api.post("/v1/sessions/chat-1/hibernate")
    assert (refused.status_code, refused.json()["error"]) == (
        409, f"hibernating sandbox {sandbox!r}: the files at '/tmp' take more than the path's declared size of "
             f"{16 * MIB} bytes (a sparse file counts at its full length where the sandbox's tar cannot store holes, "
             "as busybox's cannot); it was not hibernated")
    assert (env.runtime.sandbox(sandbox).status, env.backend.status[sandbox]) == ("bound", "running")
    assert not (env.state_dir / "hibernated" / sandbox).exists()


def test_hibernation_copies_count_toward_the_pools_snapshot_storage(tmp_path):
    env = _env(tmp_path, snapshot_storage_bytes=300 * 1024)
    first = env.claim("chat-1")["sandbox"]
    (env.backend.path(first, "/tmp") / "data.bin").write_bytes(os.urandom(200 * 1024))
    assert env.api.post("/v1/sessions/chat-1/hibernate").status_code == 200
    copied = {p["pool"]: p for p in env.api.get("/v1/pools").json()}["py"]["hibernated_bytes"]
    assert copied > 200 * 1024
    second = env.claim("chat-2")["sandbox"]
    (env.backend.path(second, "/workspace") / "data.bin").write_bytes(os.urandom(200 * 1024))
    cut = env.api.post(f"/v1/sandboxes/{second}/snapshots")
    assert (cut.status_code, cut.json()["error"]) == (
        507, f"the snapshot of sandbox {second!r} passed the {300 * 1024 - copied} bytes left of pool 'py''s "
             f"snapshot_storage of 307200 bytes ({copied} used on host 'local'); it was stopped there and nothing "
             "was kept")
    # A hibernation's copy is bounded the same way: cut, nothing kept, the session still bound and running.
    refused = env.api.post("/v1/sessions/chat-2/hibernate")
    assert (refused.status_code, refused.json()["error"]) == (
        507, f"the copy of sandbox {second!r} for its hibernation passed the {300 * 1024 - copied} bytes left of pool "
             f"'py''s snapshot_storage of 307200 bytes ({copied} used on host 'local'); it was stopped there and "
             "nothing was kept")
    assert (env.runtime.sandbox(second).status, env.backend.status[second]) == ("bound", "running")
    assert not (env.state_dir / "hibernated" / second).exists()
    env.backend.close()
    env.audit.close()


def test_a_resume_that_fails_stops_the_sandbox_again_and_it_stays_hibernated(small):
    """A copy that could not be written back answered 502 and left the session hibernated while its container ran."""
    env = small
    sandbox = env.claim("chat-1")["sandbox"]
    (env.backend.path(sandbox, "/tmp") / "notes.txt").write_bytes(b"kept")
    env.api.post("/v1/sessions/chat-1/hibernate")
    (env.state_dir / "hibernated" / sandbox / "1.tar").write_bytes(b"not a tar" * 100)
    failed = env.api.post("/v1/sessions/chat-1/resume")
    assert failed.status_code == 502
    assert failed.json()["error"].startswith(f"resuming sandbox {sandbox!r} failed: its copy of '/tmp' is not a tar "
                                             "this runtime wrote (")
    assert failed.json()["error"].endswith("; it was stopped again and it stays hibernated with its files (resume "
                                           "again, or release the session)")
    row = env.runtime.sandbox(sandbox)
    assert (row.status, row.session, env.backend.status[sandbox]) == ("hibernated", hk("chat-1"), "exited")
    assert row.detail.startswith("its last resume failed (its copy of '/tmp' is not a tar this runtime wrote (")
    assert env.api.get("/v1/sessions/chat-1").json()["container"] == "exited"
    # A container started under it anyway (by hand) is stopped by the monitor; a release ends the session cleanly.
    env.backend.start(sandbox)
    env.runtime.monitor_once()
    assert (env.runtime.sandbox(sandbox).status, env.backend.status[sandbox]) == ("hibernated", "exited")
    assert env.api.delete("/v1/sessions/chat-1").json()["status"] == "idle"
    assert not (env.state_dir / "hibernated" / sandbox).exists()


def _stream(*members: tuple[tarfile.TarInfo, bytes | None]) -> io.BytesIO:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    raw.seek(0)
    return raw


def _sparse_member(name: str, length: int, regions: list[tuple[int, int]], stored: bytes | None = None):
    """A GNU PAX 1.0 sparse member: its map, then `stored` (the regions' data, unless given otherwise)."""
    head = "\n".join([str(len(regions)), *(f"{o}\n{n}" for o, n in regions)]).encode() + b"\n"
    head += b"\0" * (-len(head) % 512)
    data = head + (stored if stored is not None else b"d" * sum(n for _, n in regions))
    info = tarfile.TarInfo(f"GNUSparseFile.0/{name}")
    info.size = len(data)
    info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": name,
                        "GNU.sparse.realsize": str(length)}
    return info, data


def _plain(name: str, data: bytes, **pax: str):
    info = tarfile.TarInfo(name)
    info.size, info.pax_headers = len(data), dict(pax)
    return info, data


def _checked(raw: io.BytesIO, sparse: bool) -> tuple[list[tuple[str, int, object]], list[str], io.BytesIO]:
    out = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="r|") as tar:
        entries = Checked(tar, MIB, sparse=sparse)
        write_tar(entries, out)
    out.seek(0)
    with tarfile.open(fileobj=out, mode="r") as tar:
        listed = [(m.name, m.size, m.sparse) for m in tar]
    out.seek(0)
    return listed, entries.left_out, out


def test_the_check_keeps_a_sparse_member_in_a_copy_and_leaves_it_out_of_an_archive():
    members = (_plain("before.txt", b"b"), _sparse_member("hole.bin", 10000, [(4096, 100), (9000, 50)]),
               _plain("after.txt", b"a"))
    listed, left_out, out = _checked(_stream(*members), sparse=True)
    assert listed == [("before.txt", 1, None), ("hole.bin", 10000, [(4096, 100), (9000, 50), (10000, 0)]),
                      ("after.txt", 1, None)]
    with tarfile.open(fileobj=out, mode="r") as tar:  # the file reads back as it was: data where it was, zeros else
        data = tar.extractfile("hole.bin").read()
    assert data == b"\0" * 4096 + b"d" * 100 + b"\0" * 4804 + b"d" * 50 + b"\0" * 950
    listed, left_out, _ = _checked(_stream(*members), sparse=False)
    assert ([name for name, _, _ in listed], left_out) == (["before.txt", "after.txt"], ["hole.bin"])


@pytest.mark.parametrize("regions, stored, why", [
    ([(4096, 100), (1000, 10)], None, "has a sparse map that is out of order or past its length (1000+10 of 10000)"),
    ([(9990, 100)], None, "has a sparse map that is out of order or past its length (9990+100 of 10000)"),
    ([(0, 9000)], b"d" * 600, "has a sparse map of 9000 bytes that does not match its data in the stream"),
])
def test_a_sparse_map_that_does_not_fit_its_file_or_its_data_is_a_forgery(regions, stored, why):
    with pytest.raises(Forged) as forged:
        _checked(_stream(_sparse_member("hole.bin", 10000, regions, stored), _plain("after.txt", b"a")), sparse=True)
    assert str(forged.value) == f"entry 'hole.bin' {why}"


def test_gnu_sparse_records_of_a_plain_member_are_not_passed_on():
    """Only the check writes them: a member's own would make the sandbox's GNU tar read it otherwise than checked."""
    listed, _, out = _checked(_stream(_plain("plain.txt", b"plain", **{"GNU.sparse.minor": "0",
                                                                       "GNU.sparse.name": "plain.txt"})), sparse=True)
    with tarfile.open(fileobj=out, mode="r") as tar:
        member = tar.getmember("plain.txt")
        assert ([k for k in member.pax_headers if k.startswith("GNU.")], tar.extractfile(member).read()) == ([], b"plain")
    with pytest.raises(Forged, match="has a sparse map of 0 bytes that does not match its data"):
        _checked(_stream(_plain("claims.bin", b"plain", **{"GNU.sparse.size": "5"})), sparse=True)
