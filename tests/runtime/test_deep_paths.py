"""Deep and long paths (issue 34, item 4): a 3,000-level `PUT` answered 409 yet made its directories, and then an
archive and a snapshot of the workspace each ran for minutes on one server thread (the tar check built every prefix
of every name). A path and every name of a copied tree are bounded (tarcheck.MAX_DEPTH, MAX_NAME) with a clear 4xx,
a refused write leaves nothing behind, and the check of a tree stops at its deadline."""

from __future__ import annotations

import io
import subprocess
import tarfile
import threading
import time

import pytest

from sandstack.runtime import transfer as transfer_module
from sandstack.runtime.tarcheck import MAX_DEPTH, Checked, DeadlinePassed, TooDeep, write_tar

DEEP = "import os\nfor _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')"  # walking down: past PATH_MAX


@pytest.fixture
def sandbox(env) -> str:
    return env.claim("chat-1")["sandbox"]


def _relays() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("sandstack-relay-")]


@pytest.fixture
def deep(env, sandbox):
    """A 3,000-level directory in the sandbox's workspace, removed after by `rm` (pytest's own clean-up of its
    temporary directories recurses once per level, and fails on it for every later run on the machine)."""
    yield env.backend.path(sandbox, "/workspace") / "d"
    subprocess.run(["rm", "-rf", "--", str(env.backend.path(sandbox, "/workspace") / "d")], check=True)


def test_a_3000_level_put_is_422_and_makes_no_directory(env, sandbox, deep):
    path = "/".join(["d"] * 3000) + "/f.txt"
    response = env.api.put(f"/v1/sandboxes/{sandbox}/files/{path}", content=b"x")
    assert response.status_code == 422
    assert response.json()["error"] == (
        f"path '{'d/' * 30}...{'/d' * 27}/f.txt' has 3001 levels and 6005 bytes; a path may have at most "
        f"{MAX_DEPTH} levels and 4095 bytes")
    assert list(env.backend.path(sandbox, "/workspace").iterdir()) == []


def test_a_refused_write_removes_the_directories_it_made(env, sandbox):
    root = env.backend.path(sandbox, "/workspace")
    (root / "kept").mkdir()

    def body():  # streamed (no length): refused past the pool's upload_limit of 1024 bytes, after the script began
        for _ in range(4):
            yield b"x" * 512

    refused = env.api.put(f"/v1/sandboxes/{sandbox}/files/kept/a/b/c.txt", content=body())
    assert refused.status_code == 413
    assert [p.name for p in root.rglob("*")] == ["kept"]
    # A directory the write did not make, or that holds something else, stays.
    (root / "kept" / "a").mkdir()
    (root / "kept" / "a" / "other.txt").write_bytes(b"mine")
    assert env.api.put(f"/v1/sandboxes/{sandbox}/files/kept/a/b/c.txt", content=body()).status_code == 413
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == ["kept", "kept/a", "kept/a/other.txt"]


def test_an_archive_and_a_snapshot_of_a_3000_level_tree_are_409_at_once_and_keep_nothing(env, sandbox, deep):
    made = env.api.post(f"/v1/sandboxes/{sandbox}/exec", json={"script": DEEP, "lang": "python"})
    assert made.json()["exit_code"] == 0, made.json()
    deep = "'" + "d/" * 30 + "..." + "/d" * 30 + "'"
    archive = env.api.get(f"/v1/sandboxes/{sandbox}/archive")
    assert (archive.status_code, archive.json()["error"]) == (
        409, f"archiving '/workspace': sandbox {sandbox!r} holds {deep} (1025 levels, 2049 bytes) is deeper or longer "
             f"than a copy takes (at most {MAX_DEPTH} levels and 4095 bytes); nothing of it was kept")
    snapshot = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots")
    assert (snapshot.status_code, snapshot.json()["levels"]) == (409, 1025)
    assert snapshot.json()["error"].startswith("snapshotting '/workspace': ")
    assert list((env.state_dir / "snapshots").iterdir()) == [] and env.api.get("/v1/snapshots").json() == []
    assert list((env.state_dir / "spool").iterdir()) == []
    deadline = time.monotonic() + 60  # the relay's thread ends with its exec (a bound on waiting for it)
    while _relays() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _relays() == []
    # The session goes on: its sandbox is bound and answers.
    assert env.api.post(f"/v1/sandboxes/{sandbox}/exec", json={"command": ["true"]}).json()["exit_code"] == 0


def _nested(depth: int) -> io.BytesIO:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for level in range(1, depth + 1):
            info = tarfile.TarInfo("/".join(["d"] * level))
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
    raw.seek(0)
    return raw


def test_the_check_takes_a_tree_at_the_bound_and_refuses_one_level_more():
    with tarfile.open(fileobj=_nested(MAX_DEPTH), mode="r|") as tar:
        write_tar(Checked(tar, 1 << 20), io.BytesIO())
    with tarfile.open(fileobj=_nested(MAX_DEPTH + 1), mode="r|") as tar, pytest.raises(TooDeep) as refused:
        write_tar(Checked(tar, 1 << 20), io.BytesIO())
    assert (refused.value.depth, refused.value.size) == (MAX_DEPTH + 1, 2 * MAX_DEPTH + 1)


def test_a_check_past_its_deadline_stops_and_the_answer_is_504(env, sandbox, monkeypatch):
    with tarfile.open(fileobj=_nested(3), mode="r|") as tar, pytest.raises(DeadlinePassed):
        write_tar(Checked(tar, 1 << 20, deadline=time.monotonic() - 1), io.BytesIO())
    (env.backend.path(sandbox, "/workspace") / "a.txt").write_bytes(b"a")
    monkeypatch.setattr(transfer_module, "TRANSFER_TIMEOUT", 0)
    archive = env.api.get(f"/v1/sandboxes/{sandbox}/archive")
    assert (archive.status_code, archive.json()["error"]) == (
        504, f"archiving '/workspace' in sandbox {sandbox!r} did not finish within 0 s; it was stopped there and "
             "nothing was kept")
