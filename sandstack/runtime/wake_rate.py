"""How often a URL site may wake its sandbox (`session.wakes_per_hour`, per pool): the times of its last wakes in
the last hour, in memory (a restarted runtime starts counting anew, which only ever allows more).

A wake is counted when it resumes something (a hibernated or paused sandbox), not when the sandbox was running
already; the wakes that wait on one in progress count as that one."""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from typing import Callable

HOUR = 3600.0


class WakeRate:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._lock = threading.Lock()
        self._times: dict[str, deque[float]] = defaultdict(deque)

    def take(self, site: str, per_hour: int) -> bool:
        """Counts a wake of `site` and answers True, or False (nothing counted) when `per_hour` were in the last
        hour."""
        now = self.clock()
        with self._lock:
            times = self._times[site]
            while times and times[0] <= now - HOUR:
                times.popleft()
            if len(times) >= per_hour:
                return False
            times.append(now)
            return True
