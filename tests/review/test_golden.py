"""Golden files of `sandstack preview` (every committed stack) and `sandstack diff` (one change of each kind).

A golden file is the command's exact output; `SANDSTACK_UPDATE_GOLDEN=1 pytest tests/review` rewrites them
(review the diff of the golden files before committing). JSON goldens are parsed and checked for the
facts each case is about, so a wrong golden cannot pass unnoticed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from sandstack.tooling.cli import main
from tests.review.cases import FILES, PAIRS, pair
from testbed.specs import STACKS, write_spec

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("SANDSTACK_UPDATE_GOLDEN") == "1"


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"no golden file {path.name}: run with SANDSTACK_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(), f"{path.name} differs: run with SANDSTACK_UPDATE_GOLDEN=1 and review"


@pytest.mark.parametrize("stack", sorted(p.stem for p in STACKS.glob("*.yaml")))
@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_preview_of_each_committed_stack(stack: str, fmt: str, tmp_path: Path, monkeypatch, capsys):
    shutil.copytree(STACKS, tmp_path / "stacks")
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(["preview", f"stacks/{stack}.yaml", "--format", fmt], capsys)
    assert (code, err) == (0, "")
    _golden(f"preview-{stack}.{ {'text': 'txt', 'json': 'json', 'markdown': 'md'}[fmt] }", out)


def _diff(case: str, tmp_path: Path, monkeypatch, capsys, *extra: str) -> tuple[int, str, str]:
    base, head = pair(case)
    write_spec(tmp_path / "base", base, FILES)
    write_spec(tmp_path / "head", head, FILES)
    monkeypatch.chdir(tmp_path)
    return _run(["diff", "base/stack.yaml", "head/stack.yaml", "--stack", "prod", *extra], capsys)


@pytest.mark.parametrize("case", PAIRS)
def test_diff_of_each_kind_of_change(case: str, tmp_path: Path, monkeypatch, capsys):
    code, out, err = _diff(case, tmp_path, monkeypatch, capsys, "--format", "markdown")
    assert (code, err) == (0, "")
    _golden(f"diff-{case}.md", out)
    code, out, err = _diff(case, tmp_path, monkeypatch, capsys, "--format", "json")
    assert (code, err) == (0, "")
    _golden(f"diff-{case}.json", out)


def test_every_golden_file_belongs_to_a_stack_or_a_case():
    expected = {f"preview-{p.stem}.{ext}" for p in STACKS.glob("*.yaml") for ext in ("txt", "json", "md")}
    expected |= {f"diff-{case}.{ext}" for case in PAIRS for ext in ("md", "json")}
    expected |= {p.name for p in GOLDEN.glob("pr-*")}  # the pull requests' own: tests/review/test_golden_pr.py
    assert {p.name for p in GOLDEN.iterdir()} == expected, "remove the golden files of removed stacks or cases"
