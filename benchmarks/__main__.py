"""`python -m benchmarks`: every section, a markdown table on stdout, results/latest.{md,json} written.

    python -m benchmarks                                  # full run (Docker sections skip without a daemon)
    python -m benchmarks --quick                          # fewer rounds: a CI-sized run
    python -m benchmarks --only validate,program,preview,check
    python -m benchmarks --profile                        # then pyinstrument each missed goal's command

Progress goes to stderr. Exit 0 when every section ran or skipped; 1 when one failed, or when
--require-docker is given and a Docker section could not run.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

from benchmarks import render
from benchmarks.context import REPO, Context, machine
from benchmarks.results import SectionResult
from benchmarks.sections import SECTIONS, Section, select

RESULTS = Path(__file__).resolve().parent / "results"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_section(section: Section, ctx: Context) -> SectionResult:
    started = time.perf_counter()
    if section.docker:
        from benchmarks.sections.engine import unavailable

        reason = unavailable()
        if reason is not None:
            log(f"[{section.name}] skipped: {reason}")
            return SectionResult(section.name, section.module().TITLE, skipped=reason)
    log(f"[{section.name}] running")
    try:
        result = section.module().run(ctx)
    except Exception as error:  # noqa: BLE001 -- one failed section must not hide the others' figures
        log(traceback.format_exc())
        first = (str(error).splitlines() or [""])[0][:300]
        result = SectionResult(section.name, section.module().TITLE, skipped=f"{type(error).__name__}: {first}",
                               failed=True)
    result.seconds = time.perf_counter() - started
    log(f"[{section.name}] done in {result.seconds:.0f} s")
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a CI-sized run)")
    parser.add_argument("--only", metavar="NAMES", help=f"comma-separated sections: {', '.join(SECTIONS)}")
    parser.add_argument("--profile", action="store_true",
                        help="profile each missed goal's command with pyinstrument (files under results/profiles)")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"results folder (default: {RESULTS})")
    parser.add_argument("--require-docker", action="store_true",
                        help="fail instead of skipping when a Docker section cannot run")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        sections = select(args.only)
    except ValueError as error:
        build_parser().error(str(error))
    command = "python -m benchmarks" + "".join(f" {shlex.quote(a)}" for a in (sys.argv[1:] if argv is None else argv))
    started, clock = datetime.now(timezone.utc), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sandstack-bench-") as tmp:
        ctx = Context(Path(tmp), quick=args.quick, log=log)
        ctx.prepare()
        results = [run_section(section, ctx) for section in sections]
        profiles = []
        if args.profile:
            from benchmarks.profile import profile_missed

            profiles = profile_missed(results, args.out / "profiles", log)
    seconds = time.perf_counter() - clock
    info = machine()
    text = render.markdown(results, command, info, started, seconds)
    if profiles:
        from benchmarks.profile import markdown as profiles_markdown

        text += "\n" + profiles_markdown(profiles, REPO)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.md").write_text(text)
    (args.out / "latest.json").write_text(render.as_json(results, command, info, started, seconds))
    print(text)
    log(f"wrote {args.out / 'latest.md'} and {args.out / 'latest.json'}")
    if args.out == RESULTS and not args.only and not args.quick:
        from benchmarks import readme

        if readme.update(REPO / "README.md", text):
            log("updated the README's Performance section")
    failed = any(r.failed for r in results)
    docker_missing = args.require_docker and any(r.skipped and SECTIONS[r.name].docker for r in results)
    return 1 if failed or docker_missing else 0


if __name__ == "__main__":
    sys.exit(main())
