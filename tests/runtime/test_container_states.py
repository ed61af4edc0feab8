"""Containers' states kept between Docker's events (sandstack.runtime.container_states): an answer is read again
without an inspect only while the event stream is live and no event for its container came since it was asked."""

from __future__ import annotations

import threading

from sandstack.runtime.backend import ContainerState
from sandstack.runtime.container_states import SETTLE, ContainerStates, changed_names

RUNNING, EXITED = ContainerState("running", 0, "t1"), ContainerState("exited", 137, "t1")


class Docker:
    """An inspect that answers what the test set and counts the asks; `during` runs inside an ask."""

    def __init__(self):
        self.now: dict[str, ContainerState] = {"sb-1": RUNNING, "sb-2": RUNNING}
        self.asked: list[str] = []
        self.during = None

    def inspect(self, name: str) -> ContainerState:
        self.asked.append(name)
        if self.during:
            self.during()
        return self.now.get(name, ContainerState("missing"))


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def live() -> tuple[Docker, Clock, ContainerStates]:
    docker, clock = Docker(), Clock()
    states = ContainerStates(docker.inspect, clock)
    states.connected()
    return docker, clock, states


def test_an_answer_is_kept_until_its_containers_next_event():
    docker, clock, states = live()
    assert [states.get("sb-1"), states.get("sb-1"), states.get("sb-2")] == [RUNNING, RUNNING, RUNNING]
    assert docker.asked == ["sb-1", "sb-2"]
    docker.now["sb-1"] = EXITED
    clock.t += SETTLE
    states.changed(["sb-1"])
    clock.t += SETTLE
    assert [states.get("sb-1"), states.get("sb-2")] == [EXITED, RUNNING]
    assert docker.asked == ["sb-1", "sb-2", "sb-1"] and states.inspects == 3


def test_nothing_is_kept_while_the_stream_is_not_live():
    docker, clock = Docker(), Clock()
    states = ContainerStates(docker.inspect, clock)
    states.get("sb-1"), states.get("sb-1")  # never connected: events could be missed
    assert docker.asked == ["sb-1", "sb-1"]
    states.connected()
    states.get("sb-1"), states.get("sb-1")
    states.lost()  # events during the gap are lost: what was kept may be stale
    states.get("sb-1")
    assert docker.asked == ["sb-1"] * 4


def test_an_answer_overtaken_by_an_event_or_a_reconnection_while_asked_is_not_kept():
    docker, clock, states = live()
    docker.during = lambda: states.changed(["sb-1"])  # the container changed while Docker answered
    clock.t += SETTLE
    states.get("sb-1")
    docker.during = None
    clock.t += SETTLE
    states.get("sb-1"), states.get("sb-1")
    assert docker.asked == ["sb-1"] * 2
    docker.during = lambda: (states.lost(), states.connected())  # the stream broke and came back meanwhile
    states.get("sb-2")
    docker.during = None
    states.get("sb-2"), states.get("sb-2")
    assert docker.asked == ["sb-1"] * 2 + ["sb-2"] * 2


def test_an_answer_asked_right_after_an_event_is_not_kept():
    docker, clock, states = live()
    states.changed(["sb-1"])
    clock.t += SETTLE / 2
    states.get("sb-1"), states.get("sb-1")
    clock.t += SETTLE / 2
    states.get("sb-1"), states.get("sb-1")
    assert docker.asked == ["sb-1"] * 3


def test_which_events_change_which_containers():
    def event(action, **attributes):
        return {"Type": "container", "Action": action, "Actor": {"ID": "abc", "Attributes": attributes}}
    assert changed_names(event("die", name="sb-1", exitCode="124")) == ["sb-1"]
    assert changed_names(event("rename", name="sb-new", oldName="/sb-1")) == ["sb-new", "sb-1"]
    assert changed_names(event("exec_start: sh -c true", name="sb-1")) == []
    assert changed_names(event("health_status: healthy", name="sb-1")) == []
    assert changed_names({"Type": "network", "Action": "connect", "Actor": {"Attributes": {"name": "n"}}}) == []


def test_follow_marks_the_stream_live_drops_on_events_and_forgets_everything_when_it_breaks():
    docker, clock = Docker(), Clock()
    states = ContainerStates(docker.inspect, clock)
    stop = threading.Event()
    seen: list[str] = []

    def events():
        clock.t += SETTLE
        states.get("sb-1"), states.get("sb-1"), states.get("sb-2")  # live: kept
        seen.append(f"kept {docker.asked}")
        yield {"Type": "container", "Action": "exec_die", "Actor": {"Attributes": {"name": "sb-1"}}}
        states.get("sb-1")
        seen.append(f"after exec {docker.asked}")
        yield {"Type": "container", "Action": "die", "Actor": {"Attributes": {"name": "sb-1"}}}
        clock.t += SETTLE
        states.get("sb-1"), states.get("sb-2")
        seen.append(f"after die {docker.asked}")
        raise OSError("the daemon went away")

    tries = iter([lambda: events(), ConnectionRefusedError])

    def subscribe():
        attempt = next(tries)
        if attempt is ConnectionRefusedError:
            stop.set()
            raise ConnectionRefusedError("refused")
        return attempt()

    states.follow(subscribe, stop)
    assert seen == ["kept ['sb-1', 'sb-2']", "after exec ['sb-1', 'sb-2']", "after die ['sb-1', 'sb-2', 'sb-1']"]
    docker.asked.clear()
    states.get("sb-2"), states.get("sb-2")  # the stream is gone: every read asks Docker
    assert docker.asked == ["sb-2", "sb-2"]


def test_a_reconcile_drops_only_the_answers_dockers_list_contradicts_and_at_most_every_period():
    from sandstack.runtime.container_states import RECONCILE

    docker, clock, states = live()
    docker.now["sb-3"] = ContainerState("missing")
    clock.t += SETTLE
    for name in ("sb-1", "sb-2", "sb-3"):
        states.get(name)
    lists: list[str] = []

    def listing():  # Docker's list: sb-1 died without its event reaching the stream; sb-3 exists now
        lists.append("list")
        return {"sb-1": ("exited", None), "sb-2": ("running", None), "sb-3": ("created", None)}

    assert states.reconcile(listing) == ["sb-1", "sb-3"]
    assert states.reconcile(listing) == [] and lists == ["list"]  # within the period: no second list
    docker.now["sb-1"] = EXITED
    assert [states.get(n).status for n in ("sb-1", "sb-2", "sb-3")] == ["exited", "running", "missing"]
    assert docker.asked == ["sb-1", "sb-2", "sb-3", "sb-1", "sb-3"]
    clock.t += RECONCILE
    assert states.reconcile(listing) == ["sb-3"] and lists == ["list", "list"]


def test_a_reconcile_compares_the_container_too_and_lists_nothing_when_nothing_is_kept():
    from sandstack.runtime.container_states import RECONCILE

    docker, clock, states = live()
    docker.now["sb-1"] = ContainerState("running", None, "t1", "id-1")
    clock.t += SETTLE
    states.get("sb-1")
    lists: list[str] = []
    assert states.reconcile(lambda: lists.append("list") or {"sb-1": ("running", "id-2")}) == ["sb-1"]  # renewed
    clock.t += RECONCILE
    assert states.reconcile(lambda: lists.append("list") or {}) == [] and lists == ["list"]  # nothing kept


def test_the_docker_backends_reconcile_reads_one_list_of_every_container():
    from sandstack.runtime.docker_backend import DockerBackend

    class Api:
        listed = 0

        def inspect_container(self, name):
            return {"State": {"Status": "running", "ExitCode": 0, "StartedAt": "t1"}, "Id": f"id-{name}",
                    "Created": "c"}

        def containers(self, all=False):
            assert all
            Api.listed += 1
            return [{"Names": ["/sb-1"], "State": "exited", "Id": "id-sb-1"},
                    {"Names": ["/sb-2"], "State": "running", "Id": "id-sb-2"}]

    backend = DockerBackend()
    backend._api = Api()
    backend.states.connected()
    backend.states.get("sb-1"), backend.states.get("sb-2")
    backend.reconcile_states()
    assert Api.listed == 1 and backend.states.inspects == 2
    backend.states.get("sb-1"), backend.states.get("sb-2")  # sb-1 contradicted by the list: asked again
    assert backend.states.inspects == 3
