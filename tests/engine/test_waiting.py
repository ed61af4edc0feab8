"""`wait_until`'s deadlines bound waiting only: a failing wait gives a busy machine at least a minute."""

from __future__ import annotations

import pytest

from testbed import waiting


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(waiting, "time", fake)
    return fake


def test_a_short_deadline_that_fails_the_test_still_waits_a_minute(clock):
    # Ready after 30 s (a busy machine): the caller's 10 s would have failed the test.
    assert waiting.wait_until(lambda: clock.now >= 30 and "ready", 10, interval=1, what="it") == "ready"
    with pytest.raises(AssertionError, match=r"^timed out after 60s waiting for never$"):
        waiting.wait_until(lambda: False, 10, interval=1, what="never")
    assert clock.now == pytest.approx(30 + 60)


def test_a_wait_that_does_not_check_keeps_its_own_deadline(clock):
    assert waiting.wait_until(lambda: [], 15, interval=1, check=False) == []
    assert clock.now == pytest.approx(15)
