"""Claims, idempotency, exhaustion, concurrency, release = reset, faults and a runtime restart."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from tests.runtime.conftest import PY, hk


def test_claim_binds_the_first_idle_sandbox_and_is_idempotent_per_session(env):
    first = env.claim("chat-1")
    assert (first["sandbox"], first["status"], first["session"], first["pool"], first["host"]) == \
        (PY[0], "bound", "chat-1", "py", "local")
    again = env.api.post("/v1/sessions", json={"pool": "py", "session": "chat-1"})
    assert again.status_code == 200
    assert again.json()["sandbox"] == PY[0]
    assert env.claim("chat-2")["sandbox"] == PY[1]


def test_exhausted_pool_answers_503_naming_pool_and_host(env):
    env.claim("only", pool="web")
    response = env.api.post("/v1/sessions", json={"pool": "web", "session": "second"})
    assert response.status_code == 503
    assert response.json() == {"error": "no capacity: every sandbox of pool 'web' on host 'local' is in use "
                                        "(1 declared)", "pool": "web", "host": "local"}


def test_20_concurrent_claims_on_a_pool_of_4_bind_exactly_4(env):
    def claim(i: int) -> tuple[int, str | None]:
        response = env.api.post("/v1/sessions", json={"pool": "py", "session": f"s-{i}"})
        return response.status_code, response.json().get("sandbox")

    with ThreadPoolExecutor(max_workers=20) as executor:
        results = list(executor.map(claim, range(20)))
    assert sorted(code for code, _ in results) == [201] * 4 + [503] * 16
    assert sorted(name for code, name in results if code == 201) == PY
    assert [row.status for row in env.runtime.store.sandboxes("py")] == ["bound"] * 4


def test_unknown_pool_and_session_are_404_naming_them(env):
    response = env.api.post("/v1/sessions", json={"pool": "gpu", "session": "x"})
    assert (response.status_code, response.json()) == (404, {"error": "pool 'gpu' is not on host 'local'",
                                                             "pool": "gpu", "host": "local"})
    response = env.api.delete("/v1/sessions/nobody")
    assert (response.status_code, response.json()) == (404, {"error": "session 'nobody' is not on host 'local'",
                                                             "session": "nobody", "host": "local"})
    response = env.api.get("/v1/sandboxes/sandstack-t-py-9")
    assert response.status_code == 404
    assert response.json()["error"] == "sandbox 'sandstack-t-py-9' is not on host 'local'"


def test_a_session_id_bound_in_another_pool_is_409(env):
    env.claim("chat-1", pool="web")
    response = env.api.post("/v1/sessions", json={"pool": "py", "session": "chat-1"})
    assert response.status_code == 409
    assert response.json()["error"] == "session 'chat-1' is bound to a sandbox of pool 'web', not 'py'"


def test_release_restarts_the_sandbox_with_empty_writable_paths_and_returns_it_to_the_pool(env):
    name = env.claim("chat-1")["sandbox"]
    assert env.api.put(f"/v1/sandboxes/{name}/files/secret.txt", content=b"mine").status_code == 204
    env.api.post(f"/v1/sandboxes/{name}/exec", json={"command": ["sh", "-c", "echo x > /dev/null; touch t"],
                                                      "cwd": "/tmp"})
    starts = env.backend.starts[name]
    released = env.api.delete("/v1/sessions/chat-1")
    assert released.status_code == 200
    assert (released.json()["status"], released.json()["session"]) == ("idle", None)
    assert env.backend.starts[name] == starts + 1
    nxt = env.claim("chat-2")
    assert nxt["sandbox"] == name
    listing = env.api.get(f"/v1/sandboxes/{name}/files/").json()
    assert listing == {"path": "", "entries": []}
    assert list(env.backend.path(name, "/tmp").iterdir()) == []


def test_daemon_unreachable_is_503_and_changes_nothing(env):
    env.claim("chat-1")
    env.backend.daemon_down = True
    response = env.api.post("/v1/sessions", json={"pool": "py", "session": "chat-2"})
    assert (response.status_code, response.json()) == (503, {
        "error": "the Docker daemon of host 'local' does not answer; nothing was changed", "host": "local"})
    released = env.api.delete("/v1/sessions/chat-1")
    assert released.status_code == 503
    env.backend.daemon_down = False
    assert [(r.status, r.session) for r in env.runtime.store.sandboxes("py")] == \
        [("bound", hk("chat-1")), ("idle", None), ("idle", None), ("idle", None)]


def test_a_sandbox_that_died_while_bound_is_reported_unhealthy_then_reset(env):
    name = env.claim("chat-1")["sandbox"]
    env.backend.die(name, 137)
    env.runtime.monitor_once()
    status = env.api.get(f"/v1/sandboxes/{name}").json()
    assert (status["status"], status["session"], status["container"]) == ("unhealthy", None, "exited")
    assert status["detail"] == "container is exited (exit 137) while bound to session 'chat-1'"
    env.runtime.monitor_once()
    status = env.api.get(f"/v1/sandboxes/{name}").json()
    assert (status["status"], status["container"]) == ("idle", "running")


def test_exec_in_a_sandbox_that_died_reports_it_unhealthy(env):
    name = env.claim("chat-1")["sandbox"]
    env.backend.die(name)
    response = env.api.post(f"/v1/sandboxes/{name}/exec", json={"command": ["true"]})
    assert response.status_code == 409
    assert response.json()["error"] == (f"sandbox '{name}' stopped running; it is reported unhealthy and will be "
                                        "reset, and session 'chat-1' has ended")
    assert env.runtime.sandbox(name).status == "unhealthy"


def test_sessions_and_snapshots_survive_a_runtime_restart(env):
    name = env.claim("chat-1")["sandbox"]
    env.api.put(f"/v1/sandboxes/{name}/files/a.txt", content=b"kept")
    snapshot = env.api.post(f"/v1/sandboxes/{name}/snapshots").json()["id"]
    after = env.restarted()
    assert after.api.get("/v1/sessions/chat-1").json()["sandbox"] == name
    assert after.api.get(f"/v1/snapshots/{snapshot}").json()["sandbox"] == name
    assert after.api.get(f"/v1/sandboxes/{name}/files/a.txt").content == b"kept"
    again = after.api.post("/v1/sessions", json={"pool": "py", "session": "chat-1"})
    assert (again.status_code, again.json()["sandbox"]) == (200, name)


def test_a_stopped_idle_sandbox_is_started_fresh_by_the_next_claim(env):
    env.backend.stop(PY[0])
    claimed = env.claim("chat-1")
    assert (claimed["sandbox"], claimed["container"]) == (PY[0], "running")
    assert env.backend.starts[PY[0]] == 2


def test_session_ids_are_checked(env):
    response = env.api.post("/v1/sessions", json={"pool": "py", "session": "../x"})
    assert response.status_code == 422
    assert response.json()["error"] == ("invalid request: body.session: '../x' must be 1-128 letters, digits or "
                                        "._:@- starting with a letter or digit")
