"""Debian's reference registry (`docker-registry`, the distribution project's `registry` 2.8) as a snapshot store on
this machine only: a process on a free loopback port, its storage in a folder, HTTP basic authentication from an
htpasswd file made here with a fresh random password, deletes allowed (docs/design/snapshot-store.md).

A process, not a container: the runtime's client and its tests need no Docker for it, and no test image changes.
"""

from __future__ import annotations

import contextlib
import importlib.util
import secrets
import warnings
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from testbed.waiting import stop_process

BINARY = "docker-registry"
USER = "snapshots"
# The registry checks the bcrypt hash at every request: at bcrypt's default cost (2^12) each took ~0.25 s here. A
# password of 24 random bytes needs no slow hash; 2^4 rounds.
ROUNDS = 16


@dataclass(frozen=True)
class Registry:
    url: str  # http://127.0.0.1:PORT
    username: str
    password: str  # a test's secret: never printed by the code under test
    root: Path  # its storage


def available() -> bool:
    """The registry, and Python's `crypt` to make its bcrypt htpasswd line (in the standard library up to 3.12)."""
    return shutil.which(BINARY) is not None and importlib.util.find_spec("crypt") is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(folder: Path) -> Iterator[Registry]:
    """A registry serving from `folder` until the block ends (stopped, its process waited for)."""
    folder.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(24)
    with warnings.catch_warnings():  # deprecated since 3.11; no new dependency for one bcrypt line
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt
    hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=ROUNDS))
    (folder / "htpasswd").write_text(f"{USER}:{hashed}\n")
    port = _free_port()
    (folder / "config.yml").write_text(
        "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {folder / 'data'}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
        f"auth:\n  htpasswd:\n    realm: sandstack\n    path: {folder / 'htpasswd'}\n")
    log = open(folder / "registry.log", "wb")
    process = subprocess.Popen([BINARY, "serve", str(folder / "config.yml")], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{url}/v2/", timeout=2).close()
                break
            except urllib.error.HTTPError as error:  # 401: it serves, and asks for the credentials
                if error.code == 401:
                    break
                raise
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{BINARY} did not start: {(folder / 'registry.log').read_text()[-2000:]}")
                time.sleep(0.1)
        yield Registry(url, USER, password, folder / "data")
    finally:
        stop_process(process)
        log.close()


WORKSPACE_MIB = 256  # the workspace: what the engine test and the benchmark move between hosts


def store_spec(image: str, port: int, url: str) -> str:
    """A stack standing for one host of pool `work` (one sandbox, a 320 MiB tmpfs workspace), its runtime on `port`
    keeping snapshots in the registry at `url`, repository sandstack/engine: two such stacks on one daemon are two
    hosts of the pool (the engine test and the benchmark's `snapstore` section)."""
    import yaml

    from testbed.deploy import engine_spec

    template = {"base_image": image, "command": ["sleep", "infinity"], "workdir": "/workspace",
                "limits": {"memory": "448MiB", "cpus": 1, "pids": 128},
                "filesystem": {"writable": [{"path": "/workspace", "size": "320MiB"}]},
                "readiness": {"command": ["true"], "interval": "1s"}, "lifecycle": {"max_lifetime": "1h"},
                "session": {"idle": "never", "download_limit": "512MiB", "snapshot_storage": "2GiB"}}
    data = yaml.safe_load(engine_spec(image, {"work": template}, {"work": {"template": "work", "hosts": ["local"]}}))
    data["hosts"]["local"]["runtime"] = {
        "port": port, "token": {"secret": "runtimeToken"},
        "snapshot_store": {"registry": url, "repository": "sandstack/engine", "username": USER,
                           "password": {"secret": "storePassword"}}}
    return yaml.safe_dump(data, sort_keys=False)
