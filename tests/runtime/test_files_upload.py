"""Uploads streamed into the sandbox as they arrive (no spool on the host), the upload limit counted while they
flow, and a file cut short (past the limit, the client gone) never half-written."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager

import httpx
import pytest

from tests.runtime.conftest import TOKEN, make_config, make_env
from tests.runtime.served import serve

MIB = 1024 * 1024


def _env(tmp_path, limit: int):
    config = make_config()
    pools = {name: pool.__class__(**{**pool.__dict__, "upload_limit_bytes": limit}) for name, pool in
             config.pools.items()}
    return make_env(tmp_path, config.__class__(**{**config.__dict__, "pools": pools}))


@contextmanager
def _served(tmp_path, limit: int):
    """(env, sandbox, its workspace on this side, an HTTP client of the runtime served on loopback)."""
    env = _env(tmp_path, limit)
    try:
        sandbox = env.claim("chat-1")["sandbox"]
        with serve(env.api.app) as url, httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"},
                                                     timeout=60) as http:
            yield env, sandbox, env.backend.path(sandbox, "/workspace"), http
    finally:
        env.backend.close()
        env.audit.close()


def _partial(workspace) -> list:
    return sorted(p.name for p in workspace.rglob(".sandstack-upload-*"))


def _wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + 60  # a bound on waiting only: a busy machine gets there later
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_an_upload_reaches_the_sandbox_while_it_is_still_sent_and_spools_nothing(tmp_path, monkeypatch):
    with _served(tmp_path, 64 * MIB) as (env, sandbox, workspace, http):
        monkeypatch.setattr(env.runtime.transfers, "spool", lambda: (_ for _ in ()).throw(AssertionError("spooled")))
        data = os.urandom(24 * MIB + 5)
        seen_while_sending: list[int] = []

        def body():
            yield data[:8 * MIB]
            # Half of it is still to come: the sandbox's file already holds what was sent (minus what is in flight).
            _wait_for(lambda: any(p.stat().st_size >= 2 * MIB for p in workspace.rglob(".sandstack-upload-*")),
                      "the first bytes in the sandbox")
            seen_while_sending.append(max(p.stat().st_size for p in workspace.rglob(".sandstack-upload-*")))
            for start in range(8 * MIB, len(data), 4 * MIB):
                yield data[start:start + 4 * MIB]

        response = http.put(f"/v1/sandboxes/{sandbox}/files/out/big.bin", content=body())
        assert response.status_code == 204, response.text
        assert (workspace / "out" / "big.bin").read_bytes() == data
        assert 2 * MIB <= seen_while_sending[0] < len(data)
        assert _partial(workspace) == []
        assert list((env.state_dir / "spool").iterdir()) == []
        assert env.runtime.leases.in_use(sandbox) is False


@pytest.mark.parametrize("declared", [True, False])
def test_an_upload_past_the_limit_is_413_and_leaves_the_old_file_whole(tmp_path, declared):
    with _served(tmp_path, 3 * MIB) as (env, sandbox, workspace, http):
        (workspace / "keep.bin").write_bytes(b"old contents")
        os.chmod(workspace / "keep.bin", 0o640)
        chunks = [os.urandom(MIB) for _ in range(4)]
        content = b"".join(chunks) if declared else iter(chunks)  # no Content-Length: counted while it streams
        response = http.put(f"/v1/sandboxes/{sandbox}/files/keep.bin", content=content)
        assert (response.status_code, response.json()) == (413, {
            "error": f"upload to 'keep.bin' exceeds the limit of {3 * MIB} bytes", "path": "keep.bin",
            "limit": 3 * MIB})
        assert (workspace / "keep.bin").read_bytes() == b"old contents"
        assert _partial(workspace) == []
        # A complete upload replaces it, keeping its mode.
        assert http.put(f"/v1/sandboxes/{sandbox}/files/keep.bin", content=chunks[0]).status_code == 204
        assert (workspace / "keep.bin").read_bytes() == chunks[0]
        assert oct((workspace / "keep.bin").stat().st_mode & 0o777) == oct(0o640)
        assert _partial(workspace) == []


def test_an_upload_whose_client_goes_away_leaves_nothing(tmp_path):
    with _served(tmp_path, 64 * MIB) as (env, sandbox, workspace, http):
        class Gone(Exception):
            pass

        def body():
            yield os.urandom(4 * MIB)
            _wait_for(lambda: _partial(workspace) != [], "the partial file")
            raise Gone  # the client stops mid-body: its connection closes

        with pytest.raises(Gone):
            http.put(f"/v1/sandboxes/{sandbox}/files/half.bin", content=body())
        _wait_for(lambda: _partial(workspace) == [] and not env.runtime.leases.in_use(sandbox),
                  "the partial file removed")
        assert not (workspace / "half.bin").exists()


def test_a_refused_path_answers_at_once_however_long_the_body(tmp_path):
    with _served(tmp_path, 64 * MIB) as (env, sandbox, workspace, http):
        (workspace / "dir").mkdir()
        response = http.put(f"/v1/sandboxes/{sandbox}/files/dir", content=iter([b"x" * MIB] * 8))
        assert (response.status_code, response.json()["error"]) == (409, "path 'dir' is a directory")
