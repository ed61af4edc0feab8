"""Whole-process measurements: wall time, CPU time and peak memory of a child process, over rounds.

    runs = rounds({"ours": Command([...]), "theirs": Command([...])}, 5)
    stat([r.cpu for r in runs["ours"]])                       # median, min, max, n
    paired_ratio(runs["ours"], runs["theirs"], "cpu")         # per-round ratios: median, min, max

Commands are run round-robin (A B A B …, not A A … B B …): on a shared, noisy machine a slow minute then
hits both sides of a comparison alike, and each round's ratio compares runs made seconds apart. CPU time and
peak RSS come from the child's own rusage (`os.wait4`), so they are the child's alone, not this process's.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Run:
    wall: float      # seconds, start to exit
    cpu: float       # seconds, user + system of the child
    peak_mb: float   # peak resident set size, MB (10^6 bytes, as the goals are written)
    returncode: int
    stdout: str = field(repr=False, default="")


@dataclass(frozen=True)
class Command:
    argv: list[str]
    ok: tuple[int, ...] = (0,)    # exit statuses that mean the command did its job (check: 1 = findings)
    rounds: int | None = None     # at most this many runs (an expensive case in --quick), else every round
    cwd: Path | None = None


@dataclass(frozen=True)
class Stat:
    median: float
    min: float
    max: float
    n: int


class CommandFailed(RuntimeError):
    pass


def run_once(command: Command) -> Run:
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(command.argv, stdout=out, stderr=err, cwd=command.cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        out.seek(0)
        err.seek(0)
        if proc.returncode not in command.ok:
            tail = err.read()[-2000:]
            raise CommandFailed(f"{' '.join(command.argv)} exited {proc.returncode}:\n{tail}")
        # ru_maxrss is in KiB on Linux.
        return Run(wall=wall, cpu=usage.ru_utime + usage.ru_stime, peak_mb=usage.ru_maxrss * 1024 / 1e6,
                   returncode=proc.returncode, stdout=out.read(100_000))


def rounds(commands: dict[str, Command], count: int, progress=None) -> dict[str, list[Run]]:
    """Each command once per round, in order, for `count` rounds (fewer for a command with `rounds`)."""
    runs: dict[str, list[Run]] = {key: [] for key in commands}
    for index in range(count):
        for key, command in commands.items():
            if command.rounds is not None and index >= command.rounds:
                continue
            runs[key].append(run_once(command))
            if progress:
                progress(f"round {index + 1}/{count} {key}: {runs[key][-1].wall:.2f} s")
    return runs


def warm(commands: list[Command]) -> None:
    """One unmeasured run each: the first run after a while reads the venv from disk, the rest do not."""
    for command in commands:
        run_once(command)


def stat(values: list[float]) -> Stat:
    if not values:
        raise ValueError("no values to summarise")
    return Stat(statistics.median(values), min(values), max(values), len(values))


def of(runs: list[Run], metric: str) -> Stat:
    """`metric` ("wall", "cpu", "peak_mb") over runs."""
    return stat([getattr(r, metric) for r in runs])


def paired_ratio(a: list[Run], b: list[Run], metric: str) -> Stat:
    """a / b round by round (runs of the same round were made back to back); rounds only one side ran are
    left out."""
    pairs = list(zip(a, b))
    return stat([getattr(x, metric) / getattr(y, metric) for x, y in pairs])
