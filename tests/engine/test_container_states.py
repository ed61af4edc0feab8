"""The runtime's container states on the real engine (sandstack.runtime.container_states through DockerBackend):
a state read twice is asked of Docker once; a change made outside the runtime (the host guard's kill, a `docker
rm`) is seen through Docker's event stream, and one the runtime makes itself is seen at once."""

from __future__ import annotations

import os
import time
import uuid

import docker
import pytest

from sandstack.runtime.docker_backend import DockerBackend
from testbed.harness.docker_backend import LABEL_PID, LABEL_SESSION

pytestmark = pytest.mark.docker

EVENT_WAIT = 60  # seconds at most for Docker's event to arrive (a bound on a busy machine, not a measurement)


@pytest.fixture
def container(docker_client, debian_image, harness_sweep_orphans):
    labels = {LABEL_SESSION: f"states-{uuid.uuid4().hex}", LABEL_PID: str(os.getpid()), "sandstack.role": "sandbox"}
    made = docker_client.containers.create(debian_image, ["sleep", "infinity"], labels=labels, init=True,
                                           name=f"sandstack-states-{uuid.uuid4().hex[:8]}", network_mode="none")
    try:
        yield made
    finally:
        try:
            made.remove(force=True)
        except docker.errors.NotFound:
            pass  # the test removed it


def _until(backend: DockerBackend, name: str, status: str) -> None:
    deadline = time.monotonic() + EVENT_WAIT
    while backend.state(name).status != status:
        assert time.monotonic() < deadline, f"{name} still {backend.state(name).status}, not {status}"
        time.sleep(0.05)


def test_states_are_asked_once_and_follow_changes_from_inside_and_outside(docker_client, container):
    backend = DockerBackend()
    try:
        name = container.name
        assert backend.state(name).status == "created"
        deadline = time.monotonic() + EVENT_WAIT
        while not backend.states.live:  # the event stream connected (until then, no answer is kept)
            assert time.monotonic() < deadline, "Docker's event stream did not connect"
            time.sleep(0.05)
        backend.state(name)
        asked = backend.states.inspects
        assert [backend.state(name).status for _ in range(5)] == ["created"] * 5
        assert backend.states.inspects == asked  # kept: no inspect

        backend.start(name)  # the runtime's own change: seen at once, not when the event arrives
        assert backend.state(name).running
        started = backend.state(name).started_at

        docker_client.api.kill(name)  # outside the runtime (the host guard ending it): seen through the event
        _until(backend, name, "exited")
        assert backend.state(name).exit_code == 137

        backend.start(name)
        assert backend.state(name).running and backend.state(name).started_at != started
        backend.pause(name)
        assert backend.state(name).status == "paused"
        backend.unpause(name)
        assert backend.state(name).status == "running"

        container.remove(force=True)
        _until(backend, name, "missing")
    finally:
        backend.close()
