"""The runtime's configuration taken in place (issue 36, the runtime's part): a configuration set written into its
configuration volume as the plan's reload container writes it is checked and swapped in without a restart while a
process streams; a set it refuses keeps the one in force and says why; a removed pool takes no claim while its
bound session goes on; at start the set `want` names is in force. And no session silently loses its sandbox: a
container recreated while bound (an apply renewed it, while the runtime ran or was down) ends the session with the
cause, answered by the API and written to the audit log."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sandstack.plan.runtime import ENV_CONFIG, ENV_CONFIG_DIR, ENV_TOKEN, PoolRuntime, RuntimeConfig
from sandstack.runtime.__main__ import load
from sandstack.runtime.app import create_app, reloader
from sandstack.runtime.audit import AuditLog
from sandstack.runtime.service import Runtime
from sandstack.spec.contract import CONFIG_HAVE, CONFIG_REFUSED, CONFIG_SETS, CONFIG_WANT
from tests.runtime.conftest import PY, TOKEN, WEB, WRITABLE, Env, hk, make_config
from tests.runtime.fake_backend import FakeBackend
from testbed.waiting import wait_until

EXTRA = ["sandstack-t-extra-0"]
ITEM = "SANDSTACK_RUNTIME_CONFIG_TEXT"  # the runtime's item, as the plan names it (sandstack.plan.runtime)


def write_set(root: Path, config: RuntimeConfig | str) -> str:
    """A set as the reload container writes it: sets/<digest>/<ITEM>, then `want` renamed over to point at it."""
    text = config if isinstance(config, str) else config.to_json()
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    folder = root / CONFIG_SETS / digest
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ITEM).write_text(text, encoding="utf-8")
    link = root / ".want.tmp"
    link.symlink_to(f"{CONFIG_SETS}/{digest}")
    os.replace(link, root / CONFIG_WANT)
    return digest


def with_extra(config: RuntimeConfig, **py_changes) -> RuntimeConfig:
    pools = dict(config.pools)
    pools["extra"] = PoolRuntime(tuple(EXTRA), "/workspace", WRITABLE)
    pools["py"] = dataclasses.replace(pools["py"], **py_changes)
    return dataclasses.replace(config, pools=pools)


@pytest.fixture
def live(tmp_path):
    """A runtime over sandboxes of pools py, web and (not declared yet) extra; its configuration volume."""
    backend = FakeBackend(tmp_path / "containers", PY + WEB + EXTRA, {"/workspace": "tmpfs", "/tmp": "tmpfs"})
    state, volume = tmp_path / "state", tmp_path / "config"
    runtime = Runtime(make_config(), backend, state)
    audit = AuditLog(state / "audit.log")
    app = create_app(runtime, token=TOKEN, audit=audit, monitor=False)
    env = Env(backend, runtime, TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}), state, audit)
    yield env, volume, reloader(app, runtime, volume, None)
    backend.close()
    audit.close()


def test_a_new_set_is_taken_in_place_while_a_process_streams(live):
    env, volume, watch = live
    sandbox = env.claim("s1")["sandbox"]
    bound_at = env.runtime.sandbox(sandbox).bound_at
    proc = env.api.post(f"/v1/sandboxes/{sandbox}/processes", json={"command": ["cat"], "stdin": True}).json()
    base = f"/v1/sandboxes/{sandbox}/processes/{proc['id']}"
    assert env.api.post(f"{base}/stdin", content=b"before\n").status_code == 200
    assert env.api.put(f"/v1/sandboxes/{sandbox}/files/big.bin", content=b"a" * 1500).status_code == 413
    assert env.api.post("/v1/sessions", json={"pool": "extra", "session": "e1"}).status_code == 404
    assert watch.once() is None  # no set yet: the environment's configuration stays

    digest = write_set(volume, with_extra(env.runtime.config, upload_limit_bytes=2048))
    assert watch.once() == f"have {digest}"
    assert (volume / CONFIG_HAVE).read_text() == f"{digest}\n"
    assert env.api.get("/healthz").json() == {"status": "ok", "host": "local", "config": digest}
    assert watch.once() is None  # in force: nothing to do until `want` moves
    # The new pool is claimable, the changed limit in force, and the session and its process went on.
    assert env.api.post("/v1/sessions", json={"pool": "extra", "session": "e1"}).json()["sandbox"] == EXTRA[0]
    assert env.api.put(f"/v1/sandboxes/{sandbox}/files/big.bin", content=b"a" * 1500).status_code == 204
    assert env.api.post(f"{base}/stdin", content=b"after\n").status_code == 200
    wait_until(lambda: env.api.get(base).json()["stdout_bytes"] >= 13, 60, interval=0.02, what="cat's echo")
    output = env.api.get(f"{base}/output", params={"follow": False}).text
    assert "before" in output and "after" in output
    assert env.api.get(base).json()["status"] == "running"
    row = env.runtime.sandbox(sandbox)
    assert (row.status, row.session, row.bound_at) == ("bound", hk("s1"), bound_at)


@pytest.mark.parametrize("text, why", [
    ("{not json", "is not the runtime's configuration (JSONDecodeError"),
    (dataclasses.replace(make_config(), host="other").to_json(), "it is host 'other''s configuration, not host "
                                                                  "'local''s"),
    (dataclasses.replace(make_config(), port=9999).to_json(), "the runtime serves on what it started with (port "),
])
def test_a_refused_set_keeps_the_one_in_force_and_says_why(live, text, why):
    env, volume, watch = live
    first = write_set(volume, with_extra(env.runtime.config))
    assert watch.once() == f"have {first}"
    bad = write_set(volume, text)
    assert watch.once() == f"refused {bad}"
    refused = (volume / CONFIG_REFUSED).read_text()
    assert refused.startswith(f"{bad} ") and why in refused, refused
    assert (volume / CONFIG_HAVE).read_text() == f"{first}\n"
    assert env.api.get("/healthz").json()["config"] == first
    assert watch.once() is None  # not read again until `want` moves
    assert env.api.post("/v1/sessions", json={"pool": "extra", "session": "e1"}).status_code == 201


def test_a_removed_pool_takes_no_claim_and_its_bound_session_goes_on_until_released(live):
    env, volume, watch = live
    sandbox = env.claim("w1", pool="web")["sandbox"]
    config = env.runtime.config
    digest = write_set(volume, dataclasses.replace(config, pools={"py": config.pools["py"]}))
    assert watch.once() == f"have {digest}"
    response = env.api.post("/v1/sessions", json={"pool": "web", "session": "w2"})
    assert (response.status_code, response.json()["error"]) == (404, "pool 'web' is not on host 'local'")
    assert [p["pool"] for p in env.api.get("/v1/pools").json()] == ["py"]
    ran = env.api.post(f"/v1/sandboxes/{sandbox}/exec", json={"command": ["echo", "on"]}).json()
    assert ran.get("stdout") == "on\n", ran
    env.runtime.monitor_once()
    assert env.api.get("/v1/sessions/w1").json()["status"] == "bound"  # kept while bound
    assert env.api.delete("/v1/sessions/w1").status_code == 200
    env.runtime.monitor_once()
    assert [r.name for r in env.runtime.store.sandboxes()] == PY  # the retired pool forgotten after its last session
    assert env.runtime.live.retired() == {}


def test_at_start_the_set_want_names_is_in_force(tmp_path):
    volume, file = tmp_path / "config", tmp_path / "runtime.json"
    file.write_text(make_config().to_json(), encoding="utf-8")
    environ = {ENV_CONFIG: str(file), ENV_TOKEN: TOKEN, ENV_CONFIG_DIR: str(volume)}
    start = load(environ)
    assert (start.digest, sorted(start.config.pools)) == (None, ["py", "web"])  # no set yet: the file's
    digest = write_set(volume, with_extra(make_config()))
    start = load(environ)
    assert (start.digest, sorted(start.config.pools), start.config_dir) == (digest, ["extra", "py", "web"], volume)
    write_set(volume, "{not json")
    with pytest.raises(ValueError, match="is not the runtime's configuration"):
        load(environ)


@pytest.mark.parametrize("restarted", [False, True])
def test_a_container_recreated_while_bound_ends_its_session_with_the_cause(live, restarted):
    env, _, _ = live
    sandbox = env.claim("s1")["sandbox"]
    env.api.put(f"/v1/sandboxes/{sandbox}/files/work.txt", content=b"work")
    env.runtime.monitor_once()  # the binding's container seen
    env.backend.recreate(sandbox)  # an apply renewed it (the runtime may have restarted with it)
    if restarted:
        env = env.restarted()
    env.runtime.monitor_once()
    why = ("its container was replaced while bound to session 's1' (a new container of the same name, created "
           "created-2; the stack's apply recreated it): its processes and writable paths are gone, and the session "
           "has ended")
    row = env.runtime.sandbox(sandbox)
    assert (row.status, row.session, row.detail) == ("unhealthy", None, why)
    response = env.api.get("/v1/sessions/s1")
    assert (response.status_code, response.json()["error"]) == (404, f"session 's1' has ended: {why}")
    told = [(a["who"], a["outcome"], a["session"], a["sandbox"], a["status"]) for a in env.audit.tail(10)
            if a["operation"] == "session ended"]
    assert told == [("runtime", why, "s1", sandbox, 410)]
    env.runtime.monitor_once()  # reset into the pool, and a new session starts on it
    assert env.claim("s1")["sandbox"] == sandbox
    assert env.api.get("/v1/sessions/s1").json()["status"] == "bound"


def test_a_resume_that_recreates_an_on_demand_sandbox_keeps_its_session(tmp_path):
    """The runtime's own new container (an on-demand sandbox's resume) is the session's, not a replacement."""
    from tests.runtime.ondemand_helpers import PLACES, od_env

    od = od_env(tmp_path)
    od.claim("a", pool="od")
    sandbox = od.claim("b", pool="od")["sandbox"]
    assert sandbox == PLACES[0]
    od.runtime.monitor_once()  # the binding's container seen
    before = od.backend.generation[sandbox]
    assert od.api.post("/v1/sessions/b/hibernate").status_code == 200
    assert od.api.post("/v1/sessions/b/resume").status_code == 200
    assert od.backend.generation[sandbox] == before + 1  # a new container, made by the runtime itself
    od.runtime.monitor_once()
    row = od.runtime.sandbox(sandbox)
    assert (row.status, row.session, row.detail) == ("bound", hk("b"), None)


def test_a_new_token_scope_acts_after_the_swap_and_one_without_its_secret_is_refused(tmp_path):
    """Token scopes are part of the configuration: a set naming a new scope whose secret the container's
    environment holds is taken with it; one whose secret is missing is refused naming the scope and its variable
    (never a value), and the tokens in force stay."""
    from sandstack.plan.runtime import TokenScope
    from sandstack.runtime.tokens import Tokens

    backend = FakeBackend(tmp_path / "containers", PY + WEB, {"/workspace": "tmpfs", "/tmp": "tmpfs"})
    runtime = Runtime(make_config(), backend, tmp_path / "state")
    secret = "tenant-web-" + "3b9a" * 6
    environ = {"SANDSTACK_RUNTIME_TOKEN_WEB": secret}
    app = create_app(runtime, token=TOKEN, monitor=False)
    watch = reloader(app, runtime, tmp_path / "config", lambda config: Tokens.from_environment(TOKEN, config, environ))
    tenant = TestClient(app, headers={"Authorization": f"Bearer {secret}"})
    assert tenant.get("/v1/pools").status_code == 401
    scoped = dataclasses.replace(make_config(), tokens={"web": TokenScope(("web",), "SANDSTACK_RUNTIME_TOKEN_WEB")})
    digest = write_set(tmp_path / "config", scoped)
    assert watch.once() == f"have {digest}"
    assert [p["pool"] for p in tenant.get("/v1/pools").json()] == ["web"]
    missing = dataclasses.replace(scoped, tokens={**scoped.tokens,
                                                  "py": TokenScope(("py",), "SANDSTACK_RUNTIME_TOKEN_PY")})
    bad = write_set(tmp_path / "config", missing)
    assert watch.once() == f"refused {bad}"
    assert (tmp_path / "config" / CONFIG_REFUSED).read_text() == (
        f"{bad} SANDSTACK_RUNTIME_TOKEN_PY must hold scope 'py''s token of at least 16 characters\n")
    assert [p["pool"] for p in tenant.get("/v1/pools").json()] == ["web"]
    assert secret not in (tmp_path / "config" / CONFIG_REFUSED).read_text()
    backend.close()


def test_a_set_with_another_port_restarts_the_runtime_to_take_it(live):
    """A process cannot move its sockets: with a way to restart (the container's: it ends, Docker starts it again
    from `want`), such a set ends the process instead of being refused; nothing is reported by this process."""
    env, volume, _ = live
    restarted: list[str] = []
    app = create_app(env.runtime, token=TOKEN, monitor=False)
    watch = reloader(app, env.runtime, volume, None, restarted.append)
    digest = write_set(volume, dataclasses.replace(make_config(), port=9999))
    assert watch.once() == f"restart {digest}"
    assert restarted == [digest]
    assert not (volume / CONFIG_REFUSED).exists() and not (volume / CONFIG_HAVE).exists()
    assert watch.once() is None
    assert env.runtime.config.port != 9999  # this process keeps serving what it had until it ends


def test_a_lowered_ceiling_keeps_a_bound_place_above_it_until_its_session_ends(tmp_path):
    """An on-demand place the new ceiling no longer has, while a session holds it: the session goes on (its row
    kept, never silently dropped), and its release retires the place (its container removed) and forgets it."""
    from tests.runtime.ondemand_helpers import PLACES, od_env

    od = od_env(tmp_path)
    od.claim("a", pool="od")
    od.claim("b", pool="od")
    assert od.claim("c", pool="od")["sandbox"] == PLACES[1]
    config = od.runtime.config
    lowered = dataclasses.replace(config.pools["od"].ondemand, ceiling=2,
                                  places={PLACES[0]: config.pools["od"].ondemand.places[PLACES[0]]})
    pools = {"od": dataclasses.replace(config.pools["od"], ondemand=lowered)}
    watch = reloader(od.api.app, od.runtime, tmp_path / "config", None)
    digest = write_set(tmp_path / "config", dataclasses.replace(config, pools=pools))
    assert watch.once() == f"have {digest}"
    od.runtime.monitor_once()
    assert od.api.get("/v1/sessions/c").json()["status"] == "bound"
    ran = od.api.post(f"/v1/sandboxes/{PLACES[1]}/exec", json={"command": ["echo", "on"]}).json()
    assert ran.get("stdout") == "on\n", ran
    assert od.api.delete("/v1/sessions/c").status_code == 200
    assert od.backend.status[PLACES[1]] == "missing"  # retired: removed, as a place's release does
    od.runtime.monitor_once()
    assert PLACES[1] not in [r.name for r in od.runtime.store.sandboxes()]
    assert od.runtime.live.retired_places() == {}


def test_at_a_first_deployment_the_runtime_waits_for_its_first_set(tmp_path):
    """The runtime starts before its reload container delivers a set (that container waits for the service): with a
    configuration volume and an empty configuration file (the environment holds none), it waits for `want`."""
    volume, file = tmp_path / "config", tmp_path / "runtime.json"
    file.write_text("", encoding="utf-8")  # what the entrypoint writes when the environment has no configuration
    environ = {ENV_CONFIG: str(file), ENV_TOKEN: TOKEN, ENV_CONFIG_DIR: str(volume)}
    waits: list[float] = []
    delivered: list[str] = []

    def wait(seconds: float) -> None:  # the reload container delivers the set meanwhile
        waits.append(seconds)
        if len(waits) == 3:
            delivered.append(write_set(volume, make_config()))

    start = load(environ, wait=wait)
    assert (start.digest, len(waits)) == (delivered[0], 3)
    without_volume = {ENV_CONFIG: str(file), ENV_TOKEN: TOKEN}
    with pytest.raises(ValueError):  # no volume to wait on: the empty file is an error, as before
        load(without_volume)
