"""Files confined to the workspace root, upload limits, and archives."""

from __future__ import annotations

import io
import os
import tarfile
import zipfile

import pytest


@pytest.fixture
def sandbox(env) -> str:
    return env.claim("chat-1")["sandbox"]


def url(sandbox: str, path: str) -> str:
    return f"/v1/sandboxes/{sandbox}/files/{path}"


def test_write_read_list_and_delete(env, sandbox):
    assert env.api.put(url(sandbox, "src/app/main.py"), content=b"print(1)\n").status_code == 204
    assert env.api.get(url(sandbox, "src/app/main.py")).content == b"print(1)\n"
    assert env.api.get(url(sandbox, "src")).json() == {"path": "src", "entries": [
        {"name": "app", "type": "dir", "size": 0, "mode": "0755"}]}
    assert env.api.get(url(sandbox, "src/app")).json()["entries"] == [{"name": "main.py", "type": "file", "size": 9,
                                                                              "mode": "0644"}]
    assert env.api.delete(url(sandbox, "src")).status_code == 204
    missing = env.api.get(url(sandbox, "src/app/main.py"))
    assert (missing.status_code, missing.json()["error"]) == (404, f"file 'src/app/main.py' does not exist in "
                                                                   f"sandbox '{sandbox}'")


@pytest.mark.parametrize("path, why", [
    ("%2E%2E/etc/passwd", "contains '..'"),
    ("a/%2E%2E/%2E%2E/etc", "contains '..'"),
    ("%2Fetc%2Fpasswd", "is absolute; give a path relative to the workspace root"),
])
def test_paths_that_name_something_outside_the_root_are_403(env, sandbox, path, why):
    for method in ("GET", "PUT", "DELETE"):
        response = env.api.request(method, url(sandbox, path), content=b"x" if method == "PUT" else None)
        assert response.status_code == 403, (method, response.text)
        assert response.json()["error"].endswith(why)


def test_symlinks_out_of_the_root_are_403_and_inside_it_are_followed(env, sandbox):
    workspace = env.backend.path(sandbox, "/workspace")
    (workspace / "real").mkdir()
    (workspace / "real" / "f.txt").write_bytes(b"inside")
    os.symlink("real", workspace / "inner")
    os.symlink("/etc", workspace / "etc")
    os.symlink("../tmp", workspace / "tmp-link")
    assert env.api.get(url(sandbox, "inner/f.txt")).content == b"inside"
    for path in ("etc/passwd", "etc", "tmp-link/x"):
        for method in ("GET", "PUT", "DELETE"):
            response = env.api.request(method, url(sandbox, path), content=b"x" if method == "PUT" else None)
            assert (response.status_code, response.json()["error"]) == (
                403, f"path {path!r} leads outside the workspace root '/workspace'"), (method, path)
    assert (env.backend.path(sandbox, "/tmp") / "x").exists() is False


def test_device_files_and_fifos_are_403(env, sandbox):
    os.mkfifo(env.backend.path(sandbox, "/workspace/pipe"))
    response = env.api.get(url(sandbox, "pipe"))
    assert (response.status_code, response.json()["error"]) == (403, "path 'pipe' is a device, fifo or socket")
    assert env.api.put(url(sandbox, "pipe"), content=b"x").status_code == 403


def test_uploads_over_the_pool_limit_are_413(env, sandbox):
    assert env.api.put(url(sandbox, "ok.bin"), content=b"a" * 1024).status_code == 204
    response = env.api.put(url(sandbox, "big.bin"), content=b"a" * 1025)
    assert (response.status_code, response.json()) == (413, {
        "error": "upload to 'big.bin' exceeds the limit of 1024 bytes", "path": "big.bin", "limit": 1024})

    def chunks():  # no Content-Length: counted while it streams
        yield b"a" * 1000
        yield b"a" * 1000
    assert env.api.put(url(sandbox, "streamed.bin"), content=chunks()).status_code == 413
    assert env.api.get(url(sandbox, "streamed.bin")).status_code == 404


def test_writing_onto_a_directory_or_under_a_file_is_409(env, sandbox):
    env.api.put(url(sandbox, "file"), content=b"x")
    env.api.put(url(sandbox, "dir/x"), content=b"x")
    onto_dir = env.api.put(url(sandbox, "dir"), content=b"x")
    assert (onto_dir.status_code, onto_dir.json()["error"]) == (409, "path 'dir' is a directory")
    under_file = env.api.put(url(sandbox, "file/x"), content=b"x")
    assert (under_file.status_code, under_file.json()["error"]) == (409, "a parent of path 'file/x' is not a directory")


def test_the_workspace_root_cannot_be_written_or_deleted(env, sandbox):
    response = env.api.delete(url(sandbox, ""))
    assert (response.status_code, response.json()["error"]) == (403, "path '' is the workspace root")


def test_archive_as_tar_gz_and_zip(env, sandbox):
    env.api.put(url(sandbox, "a.txt"), content=b"A")
    env.api.put(url(sandbox, "d/b.txt"), content=b"B")
    packed = env.api.get(f"/v1/sandboxes/{sandbox}/archive")
    assert packed.headers["content-type"] == "application/gzip"
    assert packed.headers["content-disposition"] == f'attachment; filename="{sandbox}-workspace.tar.gz"'
    with tarfile.open(fileobj=io.BytesIO(packed.content), mode="r:gz") as tar:
        files = {m.name.removeprefix("./"): tar.extractfile(m).read() for m in tar if m.isfile()}
    assert files == {"a.txt": b"A", "d/b.txt": b"B"}
    zipped = env.api.get(f"/v1/sandboxes/{sandbox}/archive", params={"format": "zip"})
    with zipfile.ZipFile(io.BytesIO(zipped.content)) as zf:
        assert {n: zf.read(n) for n in zf.namelist() if not n.endswith("/")} == {"a.txt": b"A", "d/b.txt": b"B"}
    bad = env.api.get(f"/v1/sandboxes/{sandbox}/archive", params={"format": "rar"})
    assert bad.status_code == 422
