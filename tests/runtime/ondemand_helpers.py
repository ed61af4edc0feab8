"""A pool with on-demand places over the fake backend: pool 'od' on host 'local', 1 warm sandbox and a ceiling of
3 (2 places); `FakeProvisioner` creates and removes the fake containers as Docker would, and keeps each body."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from fastapi.testclient import TestClient

from sandstack.plan.recipe import LABEL_ONDEMAND, LABEL_RECIPE, OnDemand
from sandstack.plan.runtime import IdlePolicy, PoolRuntime, RuntimeConfig, WritablePath
from sandstack.runtime.app import create_app
from sandstack.runtime.readiness import Probe, probe_of
from sandstack.runtime.audit import AuditLog
from sandstack.runtime.service import Runtime
from tests.runtime.conftest import TOKEN, Env
from tests.runtime.fake_backend import FakeBackend

WARM = "sandstack-t-od-0"
PLACES = ("sandstack-t-od-1", "sandstack-t-od-2")
OWNED = {"sandstack.stack": "t", "sandstack.host": "local"}
COMMON = {"Image": "sandstack-t/od:1", "Labels": {**OWNED, "sandstack.pool": "od", LABEL_ONDEMAND: "true",
                                                  LABEL_RECIPE: "r1"},
          "HostConfig": {"Memory": 268435456, "NanoCpus": 1000000000, "CgroupParent": "x"}}


def recipe(digest: str = "r1") -> OnDemand:
    return OnDemand(ceiling=3, common={**COMMON, "Labels": {**COMMON["Labels"], LABEL_RECIPE: digest}},
                    places={name: {"Hostname": f"od-{i + 1}", "HostConfig": {"CgroupParent": f"sandstack/{name}"}}
                           for i, name in enumerate(PLACES)}, wait_seconds=5)


class FakeProvisioner:
    def __init__(self, backend: FakeBackend):
        self.backend = backend
        self.bodies: dict[str, dict] = {}
        self.warm_health: dict[str, dict] = {}  # a warm sandbox's `Config.Healthcheck` (it has no body here)
        self.health_of: dict[str, str | None] = {}  # a readiness status a test sets
        self.probed: list[str] = []  # the sandboxes whose probe the runtime asked for, in order
        self.looked: list[str] = []  # the sandboxes whose state and health the runtime asked for, in order

    def create(self, name: str, body: dict) -> None:
        b = self.backend
        if b.daemon_down:
            from sandstack.runtime.backend import DaemonUnavailable
            raise DaemonUnavailable("the Docker daemon does not answer (ConnectionError)")
        if b.status.get(name, "missing") != "missing":  # Docker's 409 Conflict: the name is in use
            from sandstack.runtime.backend import SandboxNotRunning
            raise SandboxNotRunning(f'container {name!r}: Conflict. The container name "/{name}" is already in use')
        self.bodies[name] = body
        for path in b.writable:
            b.path(name, path).mkdir(parents=True, exist_ok=True)
        b.status[name], b.exit_codes[name] = "running", None
        b.starts[name] = b.starts.get(name, 0) + 1
        b.generation[name] = b.generation.get(name, 0) + 1  # a new container: a new Docker Id
        b.cpu.setdefault(name, 0)
        b.procs.setdefault(name, [])
        b.calls.append(("create", name))

    def health(self, name: str) -> tuple[str, str | None]:
        self.looked.append(name)
        return self.backend.status.get(name, "missing"), self.health_of.get(name)

    def probe(self, name: str) -> Probe | None:
        """The body's health check as Docker would hold it; a warm sandbox's from `warm_health`."""
        self.probed.append(name)
        body = self.bodies.get(name) or {"Healthcheck": self.warm_health.get(name)}
        return probe_of(body.get("Healthcheck"), body.get("WorkingDir"))

    def remove(self, name: str) -> None:
        b = self.backend
        if name in b.procs:
            b._kill(name)
        b.status[name] = "missing"
        self.bodies.pop(name, None)
        shutil.rmtree(b.root / name, ignore_errors=True)
        b.calls.append(("remove", name))

    def listed(self, labels: dict[str, str]) -> dict[str, str]:
        return {name: body["Labels"].get(LABEL_RECIPE, "") for name, body in self.bodies.items()
                if self.backend.status.get(name, "missing") != "missing"
                and all(body["Labels"].get(k) == v for k, v in labels.items())}


def od_config(*, idle: IdlePolicy | None = None, digest: str = "r1") -> RuntimeConfig:
    writable = (WritablePath("/workspace"), WritablePath("/tmp"))
    pools = {"od": PoolRuntime((WARM,), "/workspace", writable, idle=idle, ondemand=recipe(digest))}
    return RuntimeConfig(host="local", pools=pools, ondemand_labels=OWNED)


def od_env(tmp_path: Path, config: RuntimeConfig | None = None, backend: FakeBackend | None = None,
           provisioner: FakeProvisioner | None = None) -> Env:
    backend = backend or FakeBackend(tmp_path / "containers", [WARM], {"/workspace": "tmpfs", "/tmp": "tmpfs"})
    backend.provisioner = provisioner or getattr(backend, "provisioner", None) or FakeProvisioner(backend)
    state = tmp_path / "state"
    runtime = Runtime(config or od_config(), backend, state)
    audit = AuditLog(state / "audit.log")
    app = create_app(runtime, token=TOKEN, audit=audit, monitor=False)
    return Env(backend, runtime, TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}), state, audit)


# Pool `od` on two hosts, `a` and `b`, each a runtime over its own fake backend (two_hosts).
TWO_HOSTS = {"runtime": {"hosts": {"a": {"url": "http://a.test", "token": TOKEN},
                                   "b": {"url": "http://b.test", "token": TOKEN}},
                         "pools": {"od": ["a", "b"]}}}


@contextlib.contextmanager
def two_hosts(tmp_path: Path, config: RuntimeConfig | None = None) -> Iterator[tuple[dict[str, Env], object]]:
    """Hosts `a` and `b` with `config` (od_config's by default), and a sync client of both (TWO_HOSTS) whose requests
    reach each host's app in process; both closed at the end."""
    from sandstack.client import Client

    envs = {"a": od_env(tmp_path / "a", config), "b": od_env(tmp_path / "b", config)}

    def factory(endpoint, timeout, headers):
        return TestClient(envs[endpoint.name].api.app, base_url=endpoint.url, headers=headers)

    try:
        yield envs, Client.from_outputs(TWO_HOSTS, http_factory=factory)
    finally:
        for env in envs.values():
            env.backend.close()
            env.audit.close()
