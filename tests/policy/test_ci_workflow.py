"""The documented CI workflow's `sandstack check` passes on this repository's own stacks: its command lines are
read from docs/ci/sandstack-review.yml (the README's copy is generated from it) and run as written, with the
pull request's base branch replaced by this checkout's HEAD."""

from __future__ import annotations

import glob
import json
import shlex
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft4Validator

from sandstack.tooling.cli import main
from testbed.specs import REPO

WORKFLOW = REPO / "docs" / "ci" / "sandstack-review.yml"
SARIF_SCHEMA = json.loads((Path(__file__).parent / "sarif-schema-2.1.0.json").read_text())
SHELL_OPERATORS = {">", ">>", "|", "||", "&&", ";", "&"}
BASE = '"origin/$BASE"'


def check_commands() -> list[list[str]]:
    """Each `sandstack check` of the workflow's run: blocks, as argv, up to its first shell operator."""
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["review"]["steps"]
    out = []
    for step in steps:
        script = step.get("run", "").replace("\\\n", " ")
        for line in script.splitlines():
            if not line.strip().startswith("sandstack check"):
                continue
            assert BASE in line, "the test replaces the base branch; update BASE if the workflow names it otherwise"
            lexer = shlex.shlex(line.replace(BASE, "HEAD"), posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            argv = []
            for token in lexer:
                if token in SHELL_OPERATORS:
                    break
                argv.append(token)
            out.append(argv)
    return out


def test_the_workflow_checks_with_sarif_and_policy_files():
    commands = check_commands()
    assert len(commands) == 1
    argv = commands[0]
    assert argv[:3] == ["sandstack", "check", "stacks/*.yaml"] and "--policy" in argv
    assert argv[argv.index("--format") + 1] == "sarif"


@pytest.mark.parametrize("argv", check_commands(), ids=lambda argv: " ".join(argv))
def test_the_workflow_s_check_passes_on_the_repository_s_stacks(argv, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    # What the shell does before sandstack runs: expand the globs (sorted, as bash does).
    args = [item for token in argv[1:] for item in (sorted(glob.glob(token)) if "*" in token else [token])]
    assert [a for a in args if a.startswith("stacks/")] == ["stacks/dev.yaml", "stacks/prod.yaml"]
    code = main(args)
    out = capsys.readouterr()
    assert code == 0, out.err
    Draft4Validator(SARIF_SCHEMA).validate(json.loads(out.out))
    assert out.err.strip() == "0 errors, 0 warnings, 2 suppressed"
