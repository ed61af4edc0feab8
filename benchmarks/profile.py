"""`--profile`: run a missed goal's command under pyinstrument and keep the profile next to the results.

    profiles = profile_missed(sections, results_dir / "profiles")

Each command is profiled once (several figures may name the same one): `<key>.pyisession` (reload with
`pyinstrument --load FILE`), `<key>.txt` (the call tree) and `<key>.html`, plus the hotspots — functions by
their own time, and sandstack's functions by time including callees — that the results list beside it.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.results import SectionResult

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Profile:
    key: str
    argv: list[str]
    files: list[Path] = field(default_factory=list)
    self_time: list[tuple[str, float]] = field(default_factory=list)       # (function at place, seconds)
    inclusive: list[tuple[str, float]] = field(default_factory=list)       # sandstack functions, with callees
    total: float = 0.0
    error: str | None = None


def pyinstrument_argv(argv: list[str], session: Path) -> list[str]:
    """`argv` run under pyinstrument: `python -m M args` stays a module run; a console script is a script."""
    target = argv[1:] if argv[0] == sys.executable and argv[1:2] == ["-m"] else argv
    return [sys.executable, "-m", "pyinstrument", "-r", "pyisession", "-o", str(session), *target]


def _where(frame) -> str:
    path = frame.file_path_short or frame.file_path or "?"
    return f"{frame.function} ({path}:{frame.line_no})"


def hotspots(root, top: int = 8) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """(functions by self time, sandstack functions by inclusive time) in a pyinstrument frame tree.

    Inclusive time counts a function's outermost frames only, so recursion is not counted twice."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    stack = [(root, frozenset())]
    while stack:
        frame, outer = stack.pop()
        place = _where(frame)
        own[place] += frame.total_self_time
        name = f"{frame.function} ({frame.file_path_short}:{frame.line_no})"
        is_ours = "sandstack" in (frame.file_path or "") or "/components/" in (frame.file_path or "")
        if is_ours and name not in outer:
            inclusive[name] += frame.time
        for child in frame.children:
            stack.append((child, outer | {name}))
    return own.most_common(top), inclusive.most_common(top)


def profile_command(key: str, argv: list[str], folder: Path) -> Profile:
    from pyinstrument.renderers import HTMLRenderer, ConsoleRenderer
    from pyinstrument.session import Session

    folder.mkdir(parents=True, exist_ok=True)
    result = Profile(key, argv)
    session_path = folder / f"{key}.pyisession"
    proc = subprocess.run(pyinstrument_argv(argv, session_path), capture_output=True, text=True, cwd=REPO)
    # check exits 1 on findings; anything that leaves no session is a failure to profile.
    if not session_path.exists():
        result.error = f"pyinstrument exited {proc.returncode}: {proc.stderr.strip()[-300:]}"
        return result
    session = Session.load(str(session_path))
    text = ConsoleRenderer(unicode=True, color=False, show_all=False).render(session)
    (folder / f"{key}.txt").write_text(text)
    (folder / f"{key}.html").write_text(HTMLRenderer().render(session))
    result.files = [session_path, folder / f"{key}.txt", folder / f"{key}.html"]
    root = session.root_frame()
    result.total = session.duration
    if root is not None:
        result.self_time, result.inclusive = hotspots(root)
    return result


def profile_missed(sections: list[SectionResult], folder: Path, log=print) -> list[Profile]:
    done: dict[tuple[str, ...], Profile] = {}
    for section in sections:
        for figure in section.missed:
            if figure.profile is None or tuple(figure.profile) in done:
                continue
            log(f"profiling {figure.key}: {' '.join(figure.profile)}")
            done[tuple(figure.profile)] = profile_command(figure.key, figure.profile, folder)
    return list(done.values())


def display(argv: list[str]) -> str:
    """The command as a reader retypes it: file paths (the interpreter, temporary specs) by their names."""
    return " ".join(Path(a).name if a.startswith("/") else a for a in argv)


def markdown(profiles: list[Profile], relative_to: Path) -> str:
    if not profiles:
        return ""
    lines = ["### Profiles of missed goals (`--profile`)", ""]
    for p in profiles:
        command = display(p.argv)
        lines.append(f"**{p.key}** — `{command}`" + (f": {p.error}" if p.error else f", {p.total:.1f} s sampled; "
                     f"files: " + ", ".join(f"`{f.relative_to(relative_to)}`" for f in p.files)))
        if not p.error:
            lines += ["", "| Sandstack function (with callees) | s |", "|---|---:|"]
            lines += [f"| `{where}` | {seconds:.2f} |" for where, seconds in p.inclusive]
            lines += ["", "| Hottest function (own time) | s |", "|---|---:|"]
            lines += [f"| `{where}` | {seconds:.2f} |" for where, seconds in p.self_time]
        lines.append("")
    return "\n".join(lines)
