"""The table: each figure's median, spread and goal, met / not met judged on the median; stable JSON."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from benchmarks import render
from benchmarks.measure import Stat
from benchmarks.results import Figure, Goal, SectionResult

STARTED = datetime(2026, 1, 2, 3, 4, tzinfo=timezone.utc)
MACHINE = {"CPUs": "2", "Python": "3.11.7"}


def figure(median: float, goal: Goal | None, unit: str = "s", lo: float = 0.0, hi: float = 99.0) -> Figure:
    return Figure("sec.case.metric", "a figure", unit, Stat(median, lo, hi, 5), goal)


@pytest.mark.parametrize("median, goal, met", [
    (4.9, Goal("<=", 5.0), True), (5.0, Goal("<=", 5.0), True), (5.1, Goal("<=", 5.0), False),
    (25.0, Goal(">=", 20.0), True), (19.9, Goal(">=", 20.0), False), (1.0, None, None),
])
def test_goal_is_judged_on_the_median(median, goal, met):
    assert figure(median, goal).met is met


def test_a_spread_beyond_the_goal_does_not_change_the_verdict():
    assert figure(4.0, Goal("<=", 5.0), lo=3.0, hi=9.0).met is True


def test_unknown_goal_operator_is_refused():
    with pytest.raises(ValueError):
        Goal("<", 1.0)


def test_row_shows_median_spread_goal_and_verdict():
    met = render.figure_row(figure(0.412, Goal("<=", 0.5), "×", 0.4, 0.45))
    missed = render.figure_row(figure(25.3, Goal("<=", 10.0), "s", 24.0, 26.9))
    assert met == "| a figure | 0.412× | 0.400× – 0.450× | 5 | ≤ 0.5× | met |"
    assert missed == "| a figure | 25.3 s | 24.0 s – 26.9 s | 5 | ≤ 10 s | **not met** |"
    assert render.figure_row(figure(518.0, None, "MB")).endswith("| 5 |  |  |")


def test_single_run_says_so_instead_of_a_spread():
    one = Figure("k", "one", "s", Stat(2.0, 2.0, 2.0, 1))
    assert "(one run)" in render.figure_row(one)


def test_markdown_has_command_machine_summary_and_skip_reasons():
    ran = SectionResult("preview", "preview and diff", [figure(6.0, Goal("<=", 5.0)), figure(1.0, Goal("<=", 2.0))])
    skipped = SectionResult("start", "sandbox start", skipped="no Docker daemon answers (refused)")
    text = render.markdown([ran, skipped], "python -m benchmarks --quick", MACHINE, STARTED, 61.0)
    assert "`python -m benchmarks --quick`" in text
    assert "CPUs 2, Python 3.11.7" in text
    assert "**1 of 2 goals met; skipped: start.**" in text
    assert "Skipped: no Docker daemon answers (refused)" in text
    assert text.count("**not met**") == 1


def test_json_has_stable_keys_and_verdicts():
    ran = SectionResult("preview", "preview and diff", [figure(6.0, Goal("<=", 5.0))])
    data = json.loads(render.as_json([ran], "cmd", MACHINE, STARTED, 1.0))
    assert list(data) == ["format", "command", "started", "seconds", "machine", "summary", "sections"]
    section = data["sections"][0]
    assert (section["name"], section["status"], section["reason"]) == ("preview", "ran", None)
    assert section["figures"][0] == {"key": "sec.case.metric", "label": "a figure", "unit": "s", "median": 6.0,
                                     "min": 0.0, "max": 99.0, "n": 5, "goal": {"op": "<=", "limit": 5.0},
                                     "met": False}
    assert data["started"] == "2026-01-02T03:04:00Z"


def test_number_keeps_enough_digits():
    assert [render.number(v, "s") for v in (0.4123, 2.345, 25.34, 518.2)] == ["0.412 s", "2.35 s", "25.3 s",
                                                                             "518 s"]
    assert render.number(0.83, "×") == "0.830×"
