"""Bounded polling for the engine tests: every wait in them has a deadline.

A deadline bounds waiting and nothing else: it keeps a broken run from hanging, it is not a claim about how
fast anything is (that is what benchmarks/ measure). A busy machine is slow, not wrong, so a wait that fails
the test when it runs out (`check=True`) waits at least `MIN_DEADLINE` seconds, whatever its caller wrote.
"""

from __future__ import annotations

import subprocess
import time
from typing import Callable, TypeVar

T = TypeVar("T")

MIN_DEADLINE = 60.0


def wait_until(predicate: Callable[[], T], timeout: float, interval: float = 0.2, what: str = "condition",
               check: bool = True) -> T:
    """Polls `predicate` until it returns something truthy or the deadline passes: `timeout` seconds, at least
    `MIN_DEADLINE` with check=True (see the module docstring).

    Returns the truthy value; on timeout raises AssertionError naming `what` (or returns the last value
    with check=False, after exactly `timeout`: for callers that clean up what is left)."""
    if check:
        timeout = max(timeout, MIN_DEADLINE)
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = predicate()
    if not value and check:
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
    return value


def stop_process(process: subprocess.Popen, grace: float = 10) -> None:
    """A helper process the tests started, ended: SIGTERM, `grace` seconds to exit, then SIGKILL; reaped either way."""
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
