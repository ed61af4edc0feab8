"""Medians, spreads and per-round ratios, and whole-process measurement of a real child process."""

from __future__ import annotations

import sys

import pytest

from benchmarks.measure import Command, CommandFailed, Run, Stat, of, paired_ratio, rounds, run_once, stat


def runs(*walls: float) -> list[Run]:
    return [Run(wall=w, cpu=w / 2, peak_mb=10 * w, returncode=0) for w in walls]


def test_stat_is_median_min_max_and_count():
    assert stat([3.0, 1.0, 2.0, 10.0]) == Stat(median=2.5, min=1.0, max=10.0, n=4)
    assert stat([5.0]) == Stat(5.0, 5.0, 5.0, 1)


def test_stat_of_nothing_is_an_error():
    with pytest.raises(ValueError):
        stat([])


def test_of_picks_the_metric():
    assert of(runs(1.0, 3.0, 2.0), "cpu") == Stat(1.0, 0.5, 1.5, 3)
    assert of(runs(1.0, 3.0, 2.0), "peak_mb").median == 20.0


def test_paired_ratio_divides_round_by_round_then_summarises():
    ours, theirs = runs(1.0, 2.0, 9.0), runs(2.0, 2.0, 3.0)
    # per-round ratios 0.5, 1.0, 3.0 — not median(ours) / median(theirs) = 1.0
    assert paired_ratio(ours, theirs, "wall") == Stat(1.0, 0.5, 3.0, 3)


def test_paired_ratio_leaves_out_rounds_only_one_side_ran():
    assert paired_ratio(runs(1.0), runs(2.0, 4.0), "wall") == Stat(0.5, 0.5, 0.5, 1)


def test_run_once_measures_the_childs_own_cpu_and_memory():
    burn = ("import time\nx = bytearray(60_000_000)\n"
            "end = time.process_time() + 0.3\nwhile time.process_time() < end: pass")
    run = run_once(Command([sys.executable, "-c", burn]))
    assert run.cpu >= 0.3 and run.wall >= run.cpu * 0.5
    assert run.peak_mb > 60


def test_run_once_fails_on_an_unexpected_exit_status_with_its_stderr():
    with pytest.raises(CommandFailed, match="boom"):
        run_once(Command([sys.executable, "-c", "import sys; sys.exit('boom')"]))
    assert run_once(Command([sys.executable, "-c", "raise SystemExit(1)"], ok=(0, 1))).returncode == 1


def test_rounds_interleave_commands_and_respect_a_commands_round_limit():
    seen = []
    cmds = {"a": Command([sys.executable, "-c", "print('a')"]),
            "b": Command([sys.executable, "-c", "print('b')"], rounds=1)}
    result = rounds(cmds, 2, progress=seen.append)
    assert [len(result["a"]), len(result["b"])] == [2, 1]
    assert [line.split()[2].rstrip(":") for line in seen] == ["a", "b", "a"]
    assert result["a"][0].stdout == "a\n"
