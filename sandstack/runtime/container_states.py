"""Containers' states as Docker last reported them, kept current by Docker's event stream: a warm claim and a
monitor pass read a sandbox's state without an inspect (issue 22's claim latency).

A claim asked Docker for its sandbox's state (an inspect, ~10 KB of JSON) every time, and the monitor asked for
every sandbox every pass: on a busy host each inspect waited its turn in the daemon, and 200 claims in a burst
queued behind each other's inspects and the monitor's. Every change of a container's state comes with a container
event (create, start, die, pause, unpause, destroy, rename...), so a state read once stays true until its
container's next event. Here an inspect's answer is kept, and the container's next event drops it; the next read
asks Docker again.

The answer is trusted only while the stream is known to be live: an answer is kept only when the stream was
connected before the inspect was sent and no event for the container came while it was under way (a
generation per name), and a broken stream forgets every kept answer until it is connected again (events
during the gap are lost). An answer asked for within SETTLE seconds of an event for its container is not kept
either: if the daemon ever sent an event before the state it announces could be inspected, the next read asks again
rather than keeping the old state. Exec and health-check events change no state and are not counted (a health
check every second would otherwise drop every answer).

A periodic reconcile (at most every RECONCILE seconds, from the monitor's pass) holds the kept answers against one
list of Docker's containers: an answer the list contradicts (another status, another container, or none) is dropped,
so an event Docker failed to deliver while the stream looked live misleads a claim for at most that long. It only
ever drops: a list is older than an event that came after it, so it never replaces an answer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any, Callable, Iterable, Iterator

from sandstack.runtime.backend import ContainerState

log = logging.getLogger("sandstack.runtime")

SETTLE = 0.5  # seconds after a container's event during which an inspect of it is not kept
RECONNECT = 1.0  # seconds between tries to reconnect a broken event stream
RECONCILE = 30.0  # seconds between reconciles of the kept answers with Docker's list of containers
STATELESS = ("exec_", "health_status", "attach", "resize", "top", "archive-path", "extract-to-dir", "copy",
             "export", "commit")  # event actions that change no container's state


class ContainerStates:
    def __init__(self, inspect: Callable[[str], ContainerState], clock: Callable[[], float] = time.monotonic):
        self._inspect = inspect
        self._clock = clock
        self._lock = threading.Lock()
        self._live = False
        self._epoch = 0  # one per connection of the stream: an answer from an earlier one is not kept
        self._kept: dict[str, ContainerState] = {}
        self._generation: Counter[str] = Counter()  # name → events seen for it
        self._changed: dict[str, float] = {}  # name → when its last event came
        self.inspects = 0  # how many times Docker was asked (tests and metrics read it)
        self._reconciled = float("-inf")  # when the kept answers were last held against Docker's list

    @property
    def live(self) -> bool:
        """Whether the event stream is connected (answers are kept)."""
        return self._live

    def get(self, name: str) -> ContainerState:
        with self._lock:
            if self._live and name in self._kept:
                return self._kept[name]
            live, epoch, generation = self._live, self._epoch, self._generation[name]
        state = self._inspect(name)
        with self._lock:
            self.inspects += 1
            if (live and self._live and self._epoch == epoch and self._generation[name] == generation
                    and self._clock() - self._changed.get(name, float("-inf")) >= SETTLE):
                self._kept[name] = state
        return state

    def reconcile(self, listing: Callable[[], dict[str, tuple[str, str | None]]]) -> list[str]:
        """When RECONCILE seconds passed since the last: `listing()` (Docker's containers, name → (status, Id)) held
        against the kept answers; the names whose answer it contradicted, dropped (the next read asks Docker)."""
        with self._lock:
            if not self._kept or self._clock() - self._reconciled < RECONCILE:
                return []
            self._reconciled = self._clock()
        listed = listing()
        dropped = []
        with self._lock:
            for name, kept in list(self._kept.items()):
                seen = listed.get(name, ("missing", None))
                if seen != (kept.status, kept.container_id):
                    del self._kept[name]
                    dropped.append(name)
        if dropped:
            log.warning("container events: %d kept states contradicted by Docker's list (an event missed): %s",
                        len(dropped), ", ".join(sorted(dropped)))
        return dropped

    def connected(self) -> None:
        with self._lock:
            self._epoch += 1
            self._live = True
            self._kept.clear()

    def lost(self) -> None:
        with self._lock:
            self._live = False
            self._kept.clear()

    def changed(self, names: Iterable[str]) -> None:
        now = self._clock()
        with self._lock:
            for name in names:
                self._kept.pop(name, None)
                self._generation[name] += 1
                self._changed[name] = now

    def follow(self, subscribe: Callable[[], Iterator[dict[str, Any]]], stop: threading.Event) -> None:
        """Reads Docker's container events until `stop` is set: `subscribe()` opens the stream (and returns once
        Docker has registered it), its iterator yields each event decoded."""
        while not stop.is_set():
            try:
                events = subscribe()
            except Exception as error:  # noqa: BLE001 -- the daemon is down or restarting: every read asks it
                log.debug("container events: not connected (%s)", error)
                self.lost()
                stop.wait(RECONNECT)
                continue
            self.connected()
            try:
                for event in events:
                    names = changed_names(event)
                    if names:
                        self.changed(names)
            except Exception as error:  # noqa: BLE001 -- the stream broke: answers kept so far may be stale
                log.debug("container events: stream broke (%s)", error)
            finally:
                self.lost()
                close = getattr(events, "close", None)
                if close is not None:
                    close()
            stop.wait(RECONNECT)


def changed_names(event: dict[str, Any]) -> list[str]:
    """The container names whose state a Docker event may have changed (none for exec and health events)."""
    action = str(event.get("Action") or event.get("status") or "")
    if event.get("Type", "container") != "container" or action.startswith(STATELESS):
        return []
    attributes = (event.get("Actor") or {}).get("Attributes") or {}
    return [name.lstrip("/") for name in (attributes.get("name"), attributes.get("oldName")) if name]
