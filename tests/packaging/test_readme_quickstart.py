"""The README's one-minute path (between its quickstart markers) works as written: the commands that need no
network run here exactly as the README has them, from the repository's root; the install line names extras that
exist; the test command selects every test but the Docker ones."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def quickstart() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = re.search(r"<!-- BEGIN quickstart[^>]*-->\n```sh\n(.*?)```\n<!-- END quickstart -->", text, re.S)
    assert block, "README.md has no quickstart block between its markers"
    return [line for line in block.group(1).splitlines() if line.strip()]


def _run(line: str) -> subprocess.CompletedProcess:
    # As written, from the repository's root; `.venv/bin/` is the venv running these tests wherever it lives.
    assert line.startswith(".venv/bin/"), line
    command = str(BIN) + "/" + line.removeprefix(".venv/bin/")
    return subprocess.run(["bash", "-c", command], cwd=REPO, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def test_the_quickstart_is_install_validate_check_preview_and_the_tests_without_docker():
    commands = [line.split("  #")[0].strip() for line in quickstart()]
    assert commands == [
        "python3 -m venv .venv && .venv/bin/python -m pip install -e '.[test,runtime]' -c scripts/constraints.txt",
        ".venv/bin/sandstack validate stacks/*.yaml",
        ".venv/bin/sandstack check stacks/*.yaml",
        ".venv/bin/sandstack preview stacks/dev.yaml",
        '.venv/bin/python -m pytest -m "not docker" -n auto',
    ]
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"test", "runtime"} <= set(extras)
    assert (REPO / "scripts" / "constraints.txt").is_file()  # the pins CI installs: a newcomer gets the same set


@pytest.mark.parametrize("index", [1, 2, 3], ids=["validate", "check", "preview"])
def test_each_quickstart_command_runs_as_written_and_exits_0(index):
    line = quickstart()[index]
    run = _run(line)
    assert run.returncode == 0, (line, run.stdout[-2000:], run.stderr[-2000:])
    stacks = sorted(p.name for p in (REPO / "stacks").glob("*.yaml"))
    if " validate " in line:
        assert run.stderr == f"{len(stacks)} files checked, {len(stacks)} valid\n"
    elif " check " in line:
        assert run.stdout.splitlines()[-1].startswith("0 errors, ")
    else:
        assert run.stdout.startswith("stack dev (stacks/dev.yaml)\n└── host sandstack-local\n")


def test_the_quickstart_test_command_selects_every_test_but_the_docker_ones():
    run = _run(quickstart()[4].split("  #")[0].strip() + " --collect-only -q -p no:cacheprovider")
    assert run.returncode == 0, run.stdout[-2000:]
    counts = re.search(r"^(\d+)/(\d+) tests collected \((\d+) deselected\)", run.stdout, re.M)
    assert counts, run.stdout[-500:]
    selected, total, deselected = map(int, counts.groups())
    assert selected > 0 and deselected > 0 and selected + deselected == total


def test_scripts_up_without_pulumi_points_at_the_quickstart_not_at_scripts_test(tmp_path):
    # A PATH with no `pulumi` (only what the script needs before its check): the user is sent to the one-minute
    # path, printed from the README's own block, not to scripts/test, which wants root and installs Docker.
    (tmp_path / "dirname").symlink_to("/usr/bin/dirname")
    run = subprocess.run(["/bin/bash", str(REPO / "scripts" / "up")], env={"PATH": str(tmp_path)},
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert (run.returncode, run.stdout) == (1, "")
    lines = run.stderr.splitlines()
    assert lines[0].startswith("[scripts/up] ERROR: the Pulumi CLI is not installed: ")
    assert lines[0].endswith("as the README's quickstart says, from the repository's root:")
    assert lines[1:] == [f"  {line}" for line in quickstart()]
    assert "scripts/test" not in run.stderr
