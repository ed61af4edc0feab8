"""How the runtime's process serves (sandstack.runtime.__main__): uvicorn as configured there, without its access log,
whose line per request cost every claim a log record and a line through Docker's log driver, beside the audit line
each call has anyway (docs/design/runtime.md, "Claims under a burst")."""

from __future__ import annotations

import sys

import uvicorn

from sandstack.plan.runtime import ENV_CONFIG, ENV_STATE_DIR, ENV_TOKEN
from sandstack.runtime import __main__ as entry
from sandstack.runtime import docker_backend, listen
from tests.runtime.conftest import PY, WEB, make_config
from tests.runtime.fake_backend import FakeBackend


def test_the_runtime_serves_without_uvicorns_access_log(tmp_path, monkeypatch):
    config = tmp_path / "config.json"
    config.write_text(make_config().to_json(), encoding="utf-8")
    for name, value in ((ENV_CONFIG, str(config)), (ENV_TOKEN, "t" * 32), (ENV_STATE_DIR, str(tmp_path / "state"))):
        monkeypatch.setenv(name, value)
    served: list[uvicorn.Config] = []

    class Server:  # uvicorn's, recording what it was given instead of serving
        def __init__(self, config: uvicorn.Config):
            served.append(config)

        def run(self, sockets=None) -> None:
            pass

    monkeypatch.setattr(uvicorn, "Server", Server)
    monkeypatch.setattr(listen, "sockets", lambda *args: [])
    monkeypatch.setattr(docker_backend, "DockerBackend",
                        lambda: FakeBackend(tmp_path / "containers", PY + WEB, {"/workspace": "tmpfs"}))
    switch = sys.getswitchinterval()
    try:
        assert entry.main() == 0
    finally:
        sys.setswitchinterval(switch)
    assert [(c.access_log, c.log_level, c.workers) for c in served] == [(False, "info", 1)]
