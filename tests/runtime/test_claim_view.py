"""A warm claim reads memory and SQLite only (issue 37 item 3): over a backend that keeps containers' states between
Docker's events as the Docker backend does (sandstack.runtime.container_states), a claim of a sandbox the view has
confirmed makes no Docker call at all; one the view has not confirmed (the stream down, an event since) is checked
with Docker before it is handed out, and refused when it is dead; the monitor's periodic reconcile catches an event
Docker never delivered."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sandstack.runtime.app import create_app
from sandstack.runtime.backend import ContainerState
from sandstack.runtime.container_states import RECONCILE, SETTLE, ContainerStates
from sandstack.runtime.service import Runtime
from tests.runtime.conftest import PY, TOKEN, WEB, make_config
from tests.runtime.fake_backend import FakeBackend


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class ViewedDocker(FakeBackend):
    """The fake backend's containers behind the event-fed view: `asked` lists every inspect, `listed` counts the
    reconcile's lists; the test plays the event stream (connected, lost, an event)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.clock = Clock()
        self.asked: list[str] = []
        self.listed = 0
        self.states = ContainerStates(self._inspect, self.clock)

    def _inspect(self, name: str) -> ContainerState:
        self.asked.append(name)
        return super().state(name)

    def state(self, name: str) -> ContainerState:
        return self.states.get(name)

    def reconcile_states(self) -> None:
        def listing():
            self.listed += 1
            return {name: (status, f"{name}-{self.generation.get(name, 1)}") for name, status in self.status.items()
                    if status != "missing"}
        self.states.reconcile(listing)

    def daemon_calls(self) -> list[tuple[str, str]]:
        """Every Docker call since the last look: inspects and the others (start, exec, resize...)."""
        calls = [("inspect", name) for name in self.asked] + list(self.calls)
        self.asked.clear()
        self.calls.clear()
        return calls


@pytest.fixture
def viewed(tmp_path: Path):
    backend = ViewedDocker(tmp_path / "containers", PY + WEB, {"/workspace": "tmpfs", "/tmp": "tmpfs"})
    runtime = Runtime(make_config(), backend, tmp_path / "state")
    api = TestClient(create_app(runtime, token=TOKEN, monitor=False), headers={"Authorization": f"Bearer {TOKEN}"})
    backend.states.connected()
    backend.clock.t += SETTLE
    runtime.monitor_once()  # the pass reads every sandbox once: the view holds each one's state from now on
    backend.daemon_calls()
    yield runtime, backend, api
    backend.close()


def _claim(api, session: str) -> tuple[int, str, str]:
    answer = api.post("/v1/sessions", json={"pool": "py", "session": session})
    return answer.status_code, answer.json()["sandbox"], answer.json()["container"]


def test_a_warm_claim_of_a_confirmed_sandbox_makes_no_docker_call(viewed):
    runtime, backend, api = viewed
    assert [_claim(api, f"chat-{i}") for i in range(3)] == [(201, PY[i], "running") for i in range(3)]
    assert backend.daemon_calls() == []


def test_a_sandbox_the_view_has_not_confirmed_is_checked_with_docker_first(viewed):
    runtime, backend, api = viewed
    backend.states.lost()  # the stream broke: nothing kept is trusted
    assert _claim(api, "chat-1") == (201, PY[0], "running")
    assert backend.daemon_calls() == [("inspect", PY[0])]
    backend.states.connected()
    backend.clock.t += SETTLE
    runtime.monitor_once()
    backend.daemon_calls()
    # An event for PY[1] (it died) has come: its state is asked again, and the dead sandbox is not handed out.
    backend.status[PY[1]] = "dead"
    backend.states.changed([PY[1]])
    backend.clock.t += SETTLE
    assert _claim(api, "chat-2") == (201, PY[2], "running")
    assert backend.daemon_calls() == [("inspect", PY[1])]
    row = runtime.sandbox(PY[1])
    assert (row.status, row.session, row.detail) == ("unhealthy", None, "container is dead while idle")


def test_the_monitors_reconcile_catches_an_event_docker_never_delivered(viewed):
    runtime, backend, api = viewed
    backend.status[PY[0]] = "dead"  # no event: the view still says running
    backend.clock.t += RECONCILE
    runtime.monitor_once()
    assert backend.listed == 1
    assert ("inspect", PY[0]) in backend.daemon_calls()
    assert runtime.sandbox(PY[0]).status == "unhealthy"
    assert _claim(api, "chat-1") == (201, PY[1], "running")
    assert backend.daemon_calls() == []
