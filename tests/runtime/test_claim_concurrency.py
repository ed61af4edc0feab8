"""Concurrent claims against a slow Docker (issue 22's concurrency goal): a warm claim asks Docker with no store lock
held and binds by compare-and-set (sandstack.runtime.claims); the monitor's verdicts and the on-demand retire do
not undo a binding made while Docker was being asked."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sandstack.runtime.backend import DaemonUnavailable
from sandstack.runtime.errors import ApiError
from sandstack.runtime.service import Runtime
from tests.runtime.conftest import PY, WEB, hk, make_config
from tests.runtime.fake_backend import FakeBackend
from tests.runtime.ondemand_helpers import PLACES, WARM, FakeProvisioner, od_config


class SlowDocker(FakeBackend):
    """The fake backend whose `state` (Docker's inspect) can be slowed, counted and interrupted by a test."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.delay = 0.0
        self.in_flight = 0
        self.most_in_flight = 0
        self.counter = threading.Condition()
        self.meanwhile: dict[str, object] = {}  # sandbox → what happens while Docker answers about it (once)
        self.on_state = None  # called inside every state call (a probe of what the caller holds)

    def state(self, name: str):
        answer = super().state(name)  # Docker's answer is as the container was when asked
        with self.counter:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.counter.notify_all()
        try:
            if self.on_state:
                self.on_state(name)
            if name in self.meanwhile:
                self.meanwhile.pop(name)()
            if self.delay:
                time.sleep(self.delay * random.uniform(0.5, 1.5))
        finally:
            with self.counter:
                self.in_flight -= 1
        return answer

    def wait_overlap(self, count: int, timeout: float) -> None:
        """Hold this call until `count` calls are in flight at once (or the timeout passes)."""
        with self.counter:
            self.counter.wait_for(lambda: self.in_flight >= count, timeout)


@pytest.fixture
def slow(tmp_path: Path):
    backend = SlowDocker(tmp_path / "containers", PY + WEB, {"/workspace": "tmpfs", "/tmp": "tmpfs"})
    runtime = Runtime(make_config(), backend, tmp_path / "state")
    yield runtime, backend
    backend.close()


def test_concurrent_warm_claims_ask_docker_at_the_same_time(slow):
    runtime, backend = slow
    # Each inspect waits (up to 3 s) for the others: under a lock held across the call they could never overlap.
    backend.on_state = lambda name: backend.wait_overlap(len(PY), timeout=3)
    with ThreadPoolExecutor(max_workers=len(PY)) as pool:
        claimed = list(pool.map(lambda i: runtime.claim("py", f"s-{i}"), range(len(PY))))
    assert backend.most_in_flight == len(PY)
    assert sorted(row.name for row, created in claimed if created) == PY


def test_no_store_lock_is_held_while_a_claim_asks_docker(slow):
    runtime, backend = slow
    free: list[bool] = []

    def lock_is_free(name: str) -> None:
        # Another thread (a claim, the monitor, an exec's touch) must get the store's lock during the call.
        probe = threading.Thread(target=lambda: free.append(runtime.store._lock.acquire(timeout=2)
                                                            and (runtime.store._lock.release() or True)))
        probe.start()
        probe.join()

    backend.on_state = lock_is_free
    runtime.claim("py", "chat-1")
    backend.status[PY[1]] = "dead"  # the next claim checks a dead one, marks it and binds the one after
    row, _ = runtime.claim("py", "chat-2")
    assert (row.name, runtime.sandbox(PY[1]).status) == (PY[2], "unhealthy")
    assert free == [True, True, True]


def test_many_threads_never_get_one_sandbox_twice_with_the_monitor_running(slow):
    runtime, backend = slow
    backend.delay = 0.005
    stop = threading.Event()

    def monitor() -> None:
        while not stop.is_set():
            runtime.monitor_once()

    watcher = threading.Thread(target=monitor)
    watcher.start()

    def claim(i: int) -> tuple[str, str] | int:
        try:
            row, created = runtime.claim("py", f"s-{i}")
        except ApiError as error:
            return error.status
        assert created
        return row.name, f"s-{i}"

    try:
        with ThreadPoolExecutor(max_workers=32) as pool:
            results = list(pool.map(claim, range(64)))
    finally:
        stop.set()
        watcher.join()
    bound = [r for r in results if isinstance(r, tuple)]
    assert sorted(name for name, _ in bound) == PY  # each sandbox once
    assert [r for r in results if not isinstance(r, tuple)] == [503] * (64 - len(PY))
    assert {runtime.sandbox(name).session for name, _ in bound} == {hk(session) for _, session in bound}
    assert backend.most_in_flight > 1


def test_a_candidate_changed_while_docker_was_asked_is_not_bound_and_the_claim_takes_the_next(slow):
    runtime, backend = slow
    # The monitor (or anything else) takes PY[0] out of service while the claim's inspect of it is running.
    backend.meanwhile[PY[0]] = lambda: runtime.store.update(PY[0], status="unhealthy", detail="judged meanwhile")
    row, created = runtime.claim("py", "chat-1")
    assert (row.name, created, row.session) == (PY[1], True, hk("chat-1"))
    first = runtime.sandbox(PY[0])
    assert (first.status, first.session, first.detail) == ("unhealthy", None, "judged meanwhile")
    assert not runtime.sandboxes.busy(PY[0]) and not runtime.sandboxes.busy(PY[1])


def test_a_docker_failure_during_the_check_binds_nothing(slow):
    runtime, backend = slow

    def down() -> None:
        backend.daemon_down = True

    backend.meanwhile[PY[0]] = down  # the inspect answered, then the daemon went away: the next call fails
    backend.status[PY[0]] = "dead"
    with pytest.raises(DaemonUnavailable):  # the API answers it 503
        runtime.claim("py", "chat-1")
    backend.daemon_down = False
    assert [(r.status, r.session) for r in runtime.store.sandboxes("py")] == \
        [("unhealthy", None)] + [("idle", None)] * 3
    assert runtime.claims.reserved() == set()


def test_the_monitor_does_not_end_a_session_bound_while_it_asked_docker(slow):
    runtime, backend = slow
    for i in range(3):
        runtime.claim("py", f"early-{i}")
    last = PY[3]
    backend.status[last] = "missing"  # not created yet when the monitor asks (a runtime started before its stack)

    def created_and_claimed() -> None:
        backend.status[last] = "running"
        claimant = threading.Thread(target=lambda: runtime.claim("py", "late"))
        claimant.start()
        claimant.join()

    backend.meanwhile[last] = created_and_claimed
    runtime.monitor_once()
    row = runtime.sandbox(last)
    assert (row.status, row.session, row.detail) == ("bound", hk("late"), None)


def od_runtime(tmp_path: Path) -> tuple[SlowDocker, FakeProvisioner, Runtime]:
    """A runtime over a slow Docker with one warm sandbox and pool 'od''s on-demand places."""
    backend = SlowDocker(tmp_path / "containers", [WARM], {"/workspace": "tmpfs", "/tmp": "tmpfs"})
    provisioner = backend.provisioner = FakeProvisioner(backend)
    return backend, provisioner, Runtime(od_config(), backend, tmp_path / "state")


def test_the_monitor_does_not_retire_an_on_demand_slot_bound_after_its_list(tmp_path: Path):
    backend, _, runtime = od_runtime(tmp_path)
    try:
        runtime.claim("od", "warm-session")
        # A place left idle (a failed claim's reset leaves one so until the monitor retires it).
        place = PLACES[0]
        backend.provisioner.create(place, runtime.config.pools["od"].ondemand.body(place))
        runtime.store.update(place, status="idle")
        # While the pass asks Docker about the warm sandbox, a claim binds the idle place the pass listed as idle.
        backend.meanwhile[WARM] = lambda: runtime.claim("od", "late")
        runtime.monitor_once()
        row = runtime.sandbox(place)
        assert (row.status, row.session) == ("bound", hk("late"))
        assert backend.status[place] == "running"
    finally:
        backend.close()


def test_a_warm_claim_does_not_wait_for_an_on_demand_creation(tmp_path: Path):
    backend, provisioner, runtime = od_runtime(tmp_path)
    creating, go_on = threading.Event(), threading.Event()
    create = provisioner.create

    def slow_create(name: str, body: dict) -> None:  # Docker's create of a new container, held by the test
        creating.set()
        assert go_on.wait(10)
        create(name, body)

    provisioner.create = slow_create
    try:
        runtime.claim("od", "a")
        creator = ThreadPoolExecutor(max_workers=1)
        pending = creator.submit(runtime.claim, "od", "b")  # no warm one idle: created on demand
        assert creating.wait(5)
        runtime.release("a")
        row, created = runtime.claim("od", "c")  # while "b"'s container is still being created
        assert (row.name, created, pending.done()) == (WARM, True, False)
        go_on.set()
        assert pending.result(timeout=10)[0].name == PLACES[0]
        creator.shutdown()
    finally:
        go_on.set()
        backend.close()


def test_at_the_ceiling_the_503_names_a_warm_sandbox_out_of_service(tmp_path: Path):
    backend, _, runtime = od_runtime(tmp_path)
    try:
        # The warm sandbox is not handed out (the monitor found it missing: the runtime started before it existed).
        runtime.store.update(WARM, status="unhealthy", detail="container is missing")
        runtime.claim("od", "a")
        runtime.claim("od", "b")
        with pytest.raises(ApiError) as refused:
            runtime.claim("od", "c")
        assert (refused.value.status, refused.value.message, refused.value.fields) == (503, (
            "no capacity: pool 'od' on host 'local' is at its ceiling of 3 sandboxes (1 warm, 2 on demand), none "
            f"idle (1 out of service: {WARM} is unhealthy (container is missing))"),
            {"pool": "od", "host": "local", "ceiling": 3, "out_of_service": {WARM: "unhealthy"}})
    finally:
        backend.close()


def test_the_api_serves_more_than_40_claims_at_once(tmp_path: Path):
    from fastapi.testclient import TestClient

    from sandstack.plan.runtime import PoolRuntime, RuntimeConfig
    from sandstack.runtime.app import create_app
    from tests.runtime.conftest import TOKEN, WRITABLE

    names = [f"sandstack-t-big-{i}" for i in range(60)]
    backend = SlowDocker(tmp_path / "containers", names, {"/workspace": "tmpfs", "/tmp": "tmpfs"})
    config = RuntimeConfig(host="local", pools={"big": PoolRuntime(tuple(names), "/workspace", WRITABLE)})
    runtime = Runtime(config, backend, tmp_path / "state")
    # Each claim's inspect waits (up to 3 s) for all 60: anyio's default pool of 40 threads would hold 20 back.
    backend.on_state = lambda name: (backend.most_in_flight < len(names)
                                     and backend.wait_overlap(len(names), timeout=3))
    try:
        with TestClient(create_app(runtime, token=TOKEN, monitor=False),
                        headers={"Authorization": f"Bearer {TOKEN}"}) as api:
            with ThreadPoolExecutor(max_workers=len(names)) as pool:
                codes = list(pool.map(lambda i: api.post("/v1/sessions", json={"pool": "big", "session": f"s-{i}"})
                                      .status_code, range(len(names))))
        assert codes == [201] * len(names)
        assert backend.most_in_flight == len(names)
    finally:
        backend.close()


def test_a_warm_hit_asks_docker_once(tmp_path: Path):
    from fastapi.testclient import TestClient

    from sandstack.runtime.app import create_app
    from tests.runtime.conftest import TOKEN

    backend = SlowDocker(tmp_path / "containers", PY + WEB, {"/workspace": "tmpfs", "/tmp": "tmpfs"})
    asked: list[str] = []
    backend.on_state = asked.append
    api = TestClient(create_app(Runtime(make_config(), backend, tmp_path / "state"), token=TOKEN, monitor=False),
                     headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        claimed = api.post("/v1/sessions", json={"pool": "py", "session": "chat-1"})
        assert (claimed.status_code, claimed.json()["container"], asked) == (201, "running", [PY[0]])
        again = api.post("/v1/sessions", json={"pool": "py", "session": "chat-1"})  # not a new binding: asked
        assert (again.status_code, again.json()["container"], asked) == (200, "running", [PY[0], PY[0]])
    finally:
        backend.close()


def test_an_on_demand_creation_removes_only_a_leftover_container(tmp_path: Path):
    backend, provisioner, runtime = od_runtime(tmp_path)
    try:
        runtime.claim("od", "warm")
        runtime.claim("od", "a")  # no container of the place: created at once, nothing removed first
        assert [call for call in backend.calls if call[0] in ("create", "remove")] == [("create", PLACES[0])]
        backend.status[PLACES[1]] = "exited"  # one a runtime stopped mid-creation left under the place's name
        backend.calls.clear()
        row, created = runtime.claim("od", "b")
        assert (row.name, created, row.status) == (PLACES[1], True, "bound")
        assert [call for call in backend.calls if call[0] in ("create", "remove")] == [("remove", PLACES[1]),
                                                                                       ("create", PLACES[1])]
    finally:
        backend.close()


def test_a_commit_does_not_wait_for_the_disk(slow):
    runtime, _ = slow
    # 1 = NORMAL: in WAL mode no fsync at commit (a claim's commit is made under the one lock: ~6 ms each here).
    assert runtime.store._db.execute("PRAGMA synchronous").fetchone()[0] == 1
    assert runtime.store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
