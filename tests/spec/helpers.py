"""Spec-suite helpers: happy-path fixtures, one-field edits, and validation of YAML text in a folder."""

from __future__ import annotations

import shutil
from pathlib import Path

from sandstack.spec import check_file
from sandstack.spec.errors import Diagnostic

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def edit(text: str, old: str, new: str) -> str:
    """`text` with the one occurrence of `old` replaced: a failing case changes exactly one thing."""
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times, expected once"
    return text.replace(old, new)


def check_text(folder: Path, text: str | bytes, name: str = "stack.yaml") -> list[Diagnostic]:
    """Write `text` as `folder/name` (next to a copy of the fixtures' `agent.py`) and validate it.

    The file is reported as `name`, so the expected lines are exact strings.
    """
    shutil.copy(FIXTURES / "agent.py", folder / "agent.py")
    target = folder / name
    if isinstance(text, str):
        target.write_text(text, encoding="utf-8")
    else:
        target.write_bytes(text)
    return check_file(target, name).diagnostics


def lines(diagnostics: list[Diagnostic]) -> list[str]:
    return [d.text() for d in diagnostics]
