"""Run-scoped secret files (`secrets.files`, sandstack/runtime/secret_files.py) over the fake backend: written to
/run/secrets/session at claim (mode 0400), never stored or logged in clear, written again after a resume, gone for
the next session."""

from __future__ import annotations

import json
import stat

import pytest

from tests.runtime.conftest import make_env
from tests.runtime.ondemand_helpers import od_env
from tests.runtime.fake_backend import FakeBackend
from tests.runtime.ondemand_helpers import WARM

SECRET = "key-" + "0d9e7b" * 6  # built here, so that finding it anywhere is the test's own planting
DIR = "/run/secrets/session"
WRITABLE = {"/workspace": "tmpfs", "/tmp": "tmpfs", DIR: "tmpfs"}  # the plan's tmpfs, as every sandbox has it


@pytest.fixture
def env(tmp_path):
    env = make_env(tmp_path, writable=WRITABLE)
    yield env
    env.backend.close()
    env.audit.close()


def _stored(env) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(env.state_dir.rglob("*")) if path.is_file())


def test_a_claims_secret_files_are_written_0400_and_nothing_stored(env):
    response = env.api.post("/v1/sessions", json={"pool": "web", "session": "run-1", "secrets": {
        "env": {"A": "1"}, "files": {"api-key": SECRET, "ssh_id.pem": "second\n"}}})
    assert response.status_code == 201, response.text
    assert SECRET not in response.text
    sandbox = response.json()["sandbox"]
    on_host = env.backend.path(sandbox, DIR)  # the fake's container: its files on this machine
    assert (on_host / "api-key").read_text() == SECRET
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in on_host.iterdir()} == {"api-key": 0o400,
                                                                                     "ssh_id.pem": 0o400}
    claim = next(line for line in env.api.get("/v1/audit").json() if line["operation"] == "claim")
    assert claim["secrets"] == ["A", f"{DIR}/api-key", f"{DIR}/ssh_id.pem"]
    assert SECRET.encode() not in _stored(env)
    assert SECRET not in json.dumps(env.api.get("/v1/audit").json())
    # Not in a snapshot either: it holds the writable paths only.
    snap = env.api.post(f"/v1/sandboxes/{sandbox}/snapshots").json()
    assert DIR not in snap["paths"]
    assert SECRET.encode() not in _stored(env)


def test_the_next_session_finds_none_and_a_claim_again_replaces_them(env):
    sandbox = env.api.post("/v1/sessions", json={"pool": "web", "session": "run-1", "secrets": {
        "files": {"old": SECRET}}}).json()["sandbox"]
    again = env.api.post("/v1/sessions", json={"pool": "web", "session": "run-1", "secrets": {"files": {"new": "n"}}})
    assert again.status_code == 200
    assert sorted(p.name for p in env.backend.path(sandbox, DIR).iterdir()) == ["new"]
    assert env.api.delete("/v1/sessions/run-1").status_code == 200
    assert env.claim("run-2", pool="web")["sandbox"] == sandbox
    assert list(env.backend.path(sandbox, DIR).iterdir()) == []
    assert env.runtime.credentials.files(sandbox) == {}


def test_files_given_then_none_are_removed(env):
    sandbox = env.api.post("/v1/sessions", json={"pool": "web", "session": "run-1", "secrets": {
        "files": {"old": SECRET}}}).json()["sandbox"]
    env.api.post("/v1/sessions", json={"pool": "web", "session": "run-1", "secrets": {"env": {"A": "1"}}})
    assert list(env.backend.path(sandbox, DIR).iterdir()) == []


def test_a_failed_write_is_502_without_the_value(tmp_path):
    env = make_env(tmp_path)  # containers without the tmpfs: nowhere to write
    response = env.api.post("/v1/sessions", json={"pool": "web", "session": "run-1", "secrets": {
        "files": {"api-key": SECRET}}})
    assert response.status_code == 502
    assert response.json()["error"].startswith("the session's secret files could not be written to "
                                               "/run/secrets/session in sandbox 'sandstack-t-web-0' (exit ")
    assert SECRET not in response.text
    env.backend.close()
    env.audit.close()


def test_a_resumed_session_gets_its_files_back(tmp_path):
    backend = FakeBackend(tmp_path / "containers", [WARM], WRITABLE)
    od = od_env(tmp_path, backend=backend)
    sandbox = od.claim("a", pool="od", secrets={"files": {"api-key": SECRET}})["sandbox"]
    assert sandbox == WARM
    od.api.post("/v1/sessions/a/hibernate")
    assert backend.status[WARM] == "exited"
    assert SECRET.encode() not in _stored(od)  # not in the hibernation's copy
    assert od.api.post("/v1/sessions/a/resume").json()["status"] == "bound"  # a new tmpfs, written again
    assert (backend.path(WARM, DIR) / "api-key").read_text() == SECRET
    backend.close()
    od.audit.close()


def test_the_runtime_writes_where_the_plan_mounts_the_tmpfs():
    from sandstack.runtime.secret_files import SESSION_SECRETS_DIR
    from sandstack.spec.contract import SESSION_SECRETS_DIR as CONTRACT

    assert SESSION_SECRETS_DIR == CONTRACT == DIR
