"""Files streamed from the sandbox (no spool on the host), their length announced, the bound checked before a
byte is read, and directory listings with modes."""

from __future__ import annotations

import os

import httpx

from tests.runtime.conftest import TOKEN, make_config, make_env
from tests.runtime.served import serve


def test_a_download_streams_as_the_sandbox_reads_it_with_its_length_and_spools_nothing(tmp_path, monkeypatch):
    env = make_env(tmp_path)
    try:
        sandbox = env.claim("chat-1")["sandbox"]
        data = os.urandom(3 * 1024 * 1024 + 7)
        (env.backend.path(sandbox, "/workspace") / "big.bin").write_bytes(data)
        monkeypatch.setattr(env.runtime.transfers, "spool", lambda: (_ for _ in ()).throw(AssertionError("spooled")))
        with serve(env.api.app) as url, httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            with http.stream("GET", f"/v1/sandboxes/{sandbox}/files/big.bin") as response:
                assert response.headers["content-length"] == str(len(data))
                chunks = list(response.iter_raw())
        assert b"".join(chunks) == data and len(chunks) > 1
        assert env.runtime.leases.in_use(sandbox) is False  # the lease ends with the last byte
    finally:
        env.backend.close()
        env.audit.close()


def test_a_file_past_the_download_limit_is_413_before_a_byte_is_read(tmp_path):
    config = make_config()
    pools = {name: pool.__class__(**{**pool.__dict__, "download_limit_bytes": 1000}) for name, pool in
             config.pools.items()}
    env = make_env(tmp_path, config.__class__(**{**config.__dict__, "pools": pools}))
    try:
        sandbox = env.claim("chat-1")["sandbox"]
        with open(env.backend.path(sandbox, "/workspace") / "sparse.bin", "wb") as sparse:
            sparse.truncate(1 << 40)  # 1 TiB apparent: a read of it would never end
        response = env.api.get(f"/v1/sandboxes/{sandbox}/files/sparse.bin")
        assert response.status_code == 413 and "download_limit of 1000 bytes" in response.json()["error"]
    finally:
        env.backend.close()
        env.audit.close()


def test_a_listing_gives_each_entrys_type_size_and_mode(env):
    sandbox = env.claim("chat-1")["sandbox"]
    root = env.backend.path(sandbox, "/workspace")
    (root / "shared").mkdir()
    (root / "shared").chmod(0o2775)
    (root / "run.sh").write_bytes(b"#!/bin/sh\n")
    (root / "run.sh").chmod(0o750)
    (root / "link").symlink_to("run.sh")
    entries = env.api.get(f"/v1/sandboxes/{sandbox}/files/").json()["entries"]
    assert entries == [{"name": "link", "type": "link", "size": 0, "mode": "0777"},
                       {"name": "run.sh", "type": "file", "size": 10, "mode": "0750"},
                       {"name": "shared", "type": "dir", "size": 0, "mode": "2775"}]

