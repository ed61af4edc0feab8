"""A runtime over the fake backend, served by FastAPI's TestClient: pool 'py' (4 sandboxes) and pool 'web'
(1 sandbox) on host 'local', workspace /workspace, writable /workspace and /tmp (tmpfs)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sandstack.plan.runtime import IdlePolicy, PoolRuntime, Retention, RuntimeConfig, WritablePath
from sandstack.runtime.app import create_app
from sandstack.runtime.audit import AuditLog
from sandstack.runtime.service import Runtime
from sandstack.runtime.session_keys import key
from sandstack.runtime.tokens import OPERATOR
from tests.runtime.fake_backend import FakeBackend

TOKEN = "test-token-0123456789abcdef"
PY = [f"sandstack-t-py-{i}" for i in range(4)]
WEB = ["sandstack-t-web-0"]
WRITABLE = (WritablePath("/workspace"), WritablePath("/tmp"))


def hk(session: str) -> str:
    """The store's key of session `session` as the host's token names it (sandstack.runtime.session_keys)."""
    return key(OPERATOR, session)


def make_config(output_limit_bytes: int = 64, **overrides) -> RuntimeConfig:
    """`output_limit_bytes`: each pool's (a template's `session.exec_output_limit`)."""
    pools = {
        "py": PoolRuntime(tuple(PY), "/workspace", WRITABLE, idle=IdlePolicy("pause", 30),
                          retention=Retention(count=2, max_age_seconds=3600), upload_limit_bytes=1024,
                          output_limit_bytes=output_limit_bytes),
        "web": PoolRuntime(tuple(WEB), "/workspace", WRITABLE, idle=IdlePolicy("reset", 30),
                           output_limit_bytes=output_limit_bytes),
    }
    return RuntimeConfig(host="local", pools=pools, exec_timeout_seconds=60, **overrides)


@dataclass
class Env:
    backend: FakeBackend
    runtime: Runtime
    api: TestClient
    state_dir: Path
    audit: AuditLog

    def claim(self, session: str, pool: str = "py", **extra) -> dict:
        response = self.api.post("/v1/sessions", json={"pool": pool, "session": session, **extra})
        assert response.status_code == 201, response.text
        return response.json()

    def close(self) -> None:
        """Its sandboxes' processes ended and its audit log closed: the end of every fixture that made it."""
        self.backend.close()
        self.audit.close()

    def restarted(self) -> "Env":
        """The same state dir and backend under a new Runtime: a restart of the runtime's container."""
        runtime = Runtime(self.runtime.config, self.backend, self.state_dir)
        app = create_app(runtime, token=TOKEN, audit=self.audit, monitor=False)
        return Env(self.backend, runtime, TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}),
                   self.state_dir, self.audit)


def make_env(tmp_path: Path, config: RuntimeConfig | None = None, writable: dict[str, str] | None = None) -> Env:
    """`writable`: the fake containers' writable paths (path → 'tmpfs' or 'disk'), as the config declares them."""
    config = config or make_config()
    backend = FakeBackend(tmp_path / "containers", PY + WEB, writable or {"/workspace": "tmpfs", "/tmp": "tmpfs"})
    state = tmp_path / "state"
    runtime = Runtime(config, backend, state)
    audit = AuditLog(state / "audit.log")
    app = create_app(runtime, token=TOKEN, audit=audit, monitor=False)
    api = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})
    return Env(backend, runtime, api, state, audit)


@pytest.fixture
def env(tmp_path: Path):
    environment = make_env(tmp_path)
    yield environment
    environment.backend.close()
    environment.audit.close()
