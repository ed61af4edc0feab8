"""Which sandboxes an operation is running in, and which are being paused: the two exclude each other.

A pause freezes every process of the container. One that froze a running exec or the `tar` of a snapshot made
the command run into its timeout, and the kill at the timeout found the sandbox paused and ended the session.
So a pause answers 409 while an exec or a file, archive, snapshot or restore runs, and such an operation
answers 409 while a pause is under way; neither waits for the other.
"""

from __future__ import annotations

import threading
from collections import Counter
from contextlib import contextmanager
from functools import wraps
from typing import Iterator

from sandstack.runtime.errors import conflict


class Leases:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._uses: Counter[str] = Counter()
        self.pausing: set[str] = set()
        self.restoring_root: set[str] = set()  # a restore stopping the container (sandstack.runtime.rootsnap)

    @contextmanager
    def use(self, name: str) -> Iterator[None]:
        with self._lock:
            if name in self.pausing:
                raise conflict(f"sandbox {name!r} is being paused; resume it, then try again", sandbox=name,
                               status="paused")
            if name in self.restoring_root:
                raise conflict(f"sandbox {name!r} is being restored from a snapshot (its root, the container "
                               "stopped); try again when the restore has answered", sandbox=name, status="bound")
            self._uses[name] += 1
        try:
            yield
        finally:
            with self._lock:
                self._uses[name] -= 1
                if self._uses[name] <= 0:
                    del self._uses[name]

    @contextmanager
    def pause(self, name: str) -> Iterator[None]:
        with self._lock:
            if name in self._uses or name in self.restoring_root:
                raise conflict(f"sandbox {name!r} is busy: an exec or a file, archive, snapshot or restore is "
                               "running in it; pause it when that has finished", sandbox=name, status="bound")
            if name in self.pausing:  # one pause or hibernation at a time: the second read the row before the first
                raise conflict(f"sandbox {name!r} is being paused or hibernated already; try again when that has "
                               "answered", sandbox=name, status="bound")
            self.pausing.add(name)
        try:
            yield
        finally:
            with self._lock:
                self.pausing.discard(name)

    @contextmanager
    def restoring(self, name: str) -> Iterator[None]:
        """A restore that stops the container: none of the session's operations runs meanwhile (an exec cut off by
        the stop would end the session as a crash), and none starts."""
        with self._lock:
            if name in self._uses or name in self.pausing:
                raise conflict(f"sandbox {name!r} is busy: an exec or a file, archive, snapshot or restore is "
                               "running in it, or a pause; restore the snapshot when that has finished",
                               sandbox=name, status="bound")
            self.restoring_root.add(name)
        try:
            yield
        finally:
            with self._lock:
                self.restoring_root.discard(name)

    def in_use(self, name: str) -> bool:
        with self._lock:
            return name in self._uses


def holding(method):
    """Runs `method(self, name, ...)` (of an object with `leases`) holding sandbox `name` in use throughout."""

    @wraps(method)
    def wrapper(self, name: str, *args, **kwargs):
        with self.leases.use(name):
            return method(self, name, *args, **kwargs)
    return wrapper
