"""Bounded polling for the engine tests: every wait in them has a deadline."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, interval: float = 0.2, what: str = "condition",
               check: bool = True) -> T:
    """Polls `predicate` until it returns something truthy or `timeout` seconds pass.

    Returns the truthy value; on timeout raises AssertionError naming `what` (or returns the last value
    with check=False)."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = predicate()
    if not value and check:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")
    return value
