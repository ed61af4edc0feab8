"""A claim retried, or sent twice at once, for one session id (issue 37 item 3): it answers the same sandbox (and,
while that one is created on demand, the same creation), never binds a second one; two claims of one session at two
size classes never both answer: the first binds, the other is a 409 naming the conflict."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.runtime.conftest import hk
from tests.runtime.ondemand_helpers import PLACES, WARM, od_env
from tests.runtime.test_sizes import LARGE_BODY, sized_config


@pytest.fixture
def env(tmp_path: Path):
    env = od_env(tmp_path, sized_config())
    yield env
    env.close()


def _post(env, **body):
    return env.api.post("/v1/sessions", json={"pool": "od", "session": "s1", **body})


def _bindings(env) -> list[tuple[str, str, str | None, str | None]]:
    return [(r.name, r.status, r.session, r.size) for r in env.runtime.store.sandboxes()]


def test_a_claim_retried_after_its_answer_was_lost_answers_the_same_sandbox(env):
    first = _post(env, size="large")
    again = _post(env, size="large")
    assert (first.status_code, again.status_code) == (201, 200)
    assert [(a.json()["sandbox"], a.json()["size"], a.json()["bound_at"]) for a in (first, again)] == \
        [(WARM, "large", first.json()["bound_at"])] * 2
    assert first.json()["token"] != again.json()["token"]  # each answer carries a token of its own
    assert _bindings(env) == [(WARM, "bound", hk("s1"), "large"), (PLACES[0], "absent", None, None),
                              (PLACES[1], "absent", None, None)]


def test_a_claim_retried_while_its_sandbox_is_created_on_demand_answers_that_creation(env):
    env.claim("other", pool="od")  # the warm one is taken: s1's claim creates a place
    provisioner = env.backend.provisioner
    creating, go_on = threading.Event(), threading.Event()
    create = provisioner.create

    def held_create(name: str, body: dict) -> None:
        creating.set()
        assert go_on.wait(10)
        create(name, body)

    provisioner.create = held_create
    with ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(_post, env)
        assert creating.wait(10)
        again = _post(env)
        go_on.set()
        first = first.result(timeout=10)
    assert (again.status_code, again.json()["sandbox"], again.json()["status"]) == (200, PLACES[0], "creating")
    assert (first.status_code, first.json()["sandbox"], first.json()["status"]) == (201, PLACES[0], "bound")
    assert [call for call in env.backend.calls if call[0] == "create"] == [("create", PLACES[0])]
    assert env.runtime.store.sandbox(PLACES[1]).status == "absent"


def _held_inspect(env, name: str):
    """Holds the first claim's check of `name` (Docker's inspect) until the returned event is set."""
    checking, go_on = threading.Event(), threading.Event()
    state = env.backend.state

    def held(asked: str):
        answer = state(asked)
        if asked == name and not checking.is_set():
            checking.set()
            assert go_on.wait(10)
        return answer

    env.backend.state = held
    return checking, go_on


def test_two_claims_of_one_session_at_two_sizes_at_once_never_both_bind(env):
    # The first (a class a warm sandbox is resized to) is held in its check of the warm sandbox; the second names a
    # class of another disk (made on demand). Both used to answer, the first with the second's sandbox.
    checking, go_on = _held_inspect(env, WARM)
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(_post, env, size="large")
        assert checking.wait(10)
        second = pool.submit(_post, env, size="wide")
        threading.Timer(0.3, go_on.set).start()  # the second has had time to bind if nothing stops it
        first, second = first.result(timeout=10), second.result(timeout=10)
    assert (first.status_code, first.json()["sandbox"], first.json()["size"]) == (201, WARM, "large")
    assert (second.status_code, second.json()) == (409, {
        "error": "session 's1' holds a sandbox of size class 'large', not size class 'wide': release it to claim "
                 "another size", "session": "s1", "size": "large"})
    assert _bindings(env) == [(WARM, "bound", hk("s1"), "large"), (PLACES[0], "absent", None, None),
                              (PLACES[1], "absent", None, None)]
    assert env.backend.provisioner.bodies == {} and env.backend.limits[WARM] == LARGE_BODY


def test_a_second_claim_of_a_session_answers_only_once_the_first_has_made_its_sandbox_ready(env):
    # The first claim binds the warm sandbox, then resizes it to its class; the second, of the same class, used to
    # answer 'bound' meanwhile: a sandbox not yet at its limits.
    order: list[str] = []
    resizing, go_on = threading.Event(), threading.Event()
    resize = env.backend.resize

    def held_resize(name: str, body: dict) -> None:
        resizing.set()
        assert go_on.wait(10)
        resize(name, body)
        order.append("resized")

    env.backend.resize = held_resize
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(_post, env, size="large")
        assert resizing.wait(10)
        second = pool.submit(lambda: (_post(env, size="large"), order.append("second answered"))[0])
        threading.Timer(0.3, go_on.set).start()
        first, second = first.result(timeout=10), second.result(timeout=10)
    assert (first.status_code, second.status_code) == (201, 200)
    assert order == ["resized", "second answered"]
    assert (second.json()["sandbox"], second.json()["size"]) == (WARM, "large")


def test_a_claim_of_another_pool_while_the_first_binds_is_409_naming_the_pool(tmp_path: Path):
    import dataclasses

    from sandstack.plan.runtime import PoolRuntime, RuntimeConfig
    from tests.runtime.conftest import WRITABLE

    base = sized_config()
    config = dataclasses.replace(base, pools={**base.pools, "py": PoolRuntime(("sandstack-t-py-0",), "/workspace",
                                                                              WRITABLE)})
    assert isinstance(config, RuntimeConfig)
    from tests.runtime.fake_backend import FakeBackend

    backend = FakeBackend(tmp_path / "containers", [WARM, "sandstack-t-py-0"], {"/workspace": "tmpfs",
                                                                                 "/tmp": "tmpfs"})
    env = od_env(tmp_path, config, backend)
    try:
        checking, go_on = _held_inspect(env, WARM)
        with ThreadPoolExecutor(max_workers=2) as pool:
            first = pool.submit(_post, env)
            assert checking.wait(10)
            second = pool.submit(lambda: env.api.post("/v1/sessions", json={"pool": "py", "session": "s1"}))
            threading.Timer(0.3, go_on.set).start()
            first, second = first.result(timeout=10), second.result(timeout=10)
        assert (first.status_code, first.json()["sandbox"]) == (201, WARM)
        assert (second.status_code, second.json()) == (409, {
            "error": "session 's1' is bound to a sandbox of pool 'od', not 'py'", "session": "s1", "pool": "od"})
        assert env.runtime.store.sandbox("sandstack-t-py-0").status == "idle"
    finally:
        env.close()
