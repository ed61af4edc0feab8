"""Golden comments of the pull requests a reviewer reads (issue 38's proof): the five pull requests on
stacks/dev.yaml the review tests already use (a snapshot bump, a new allow entry, a new public port, more replicas,
more memory), plus a new pool, a memory raise across two hosts of stacks/prod.yaml, a priced stack (the example
price list) and a red `--fail-on` run, each in text, markdown and json.

`SANDSTACK_UPDATE_GOLDEN=1 pytest tests/review` rewrites them (review the diff before committing). The facts each
case is about are asserted beside the golden, so a wrong golden cannot pass unnoticed."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Callable

import pytest
import yaml

from sandstack.tooling.cli import main
from tests.review.test_categories import PRS
from tests.review.test_golden import _golden
from testbed.specs import REPO, STACKS, set_path


def _new_pool(d: dict) -> None:
    d["pools"]["scratch"] = {"template": "shell", "hosts": ["local"], "replicas": 1}


def _memory_two_hosts(d: dict) -> None:
    d["templates"]["python"]["limits"]["memory"] = "3GiB"  # python-warm: 16 per host on sbx-a and sbx-b


def _priced(d: dict) -> None:
    set_path(d, "pools.python-warm.replicas", 20)


# case → (the stack it edits, the edit, extra arguments, the exit status)
CASES: dict[str, tuple[str, Callable[[dict], None], tuple[str, ...], int]] = {
    **{pr: ("dev", edit, (), 0) for pr, edit in PRS.items()},
    "new-pool": ("dev", _new_pool, (), 0),
    "memory-two-hosts": ("prod", _memory_two_hosts, (), 0),
    "priced": ("prod", _priced, ("--prices", "policies/prices.yaml"), 0),
    # A public port: looser and a sandbox restarts (an allow entry no longer disrupts: it is taken in place).
    "red-fail-on": ("dev", PRS["port"], ("--fail-on", "security", "--fail-on", "disruption", "--fail-on",
                                          "capacity"), 3),
}
EXT = {"text": "txt", "markdown": "md", "json": "json"}


@pytest.fixture
def tree(tmp_path: Path, monkeypatch) -> Path:
    shutil.copytree(STACKS, tmp_path / "stacks")
    shutil.copytree(REPO / "policies", tmp_path / "policies")
    monkeypatch.chdir(tmp_path)
    for case, (stack, edit, _, _) in CASES.items():
        data = copy.deepcopy(yaml.safe_load((STACKS / f"{stack}.yaml").read_text()))
        edit(data)
        (tmp_path / "stacks" / f"pr-{case}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        # The head keeps the base's addresses and allocates a new pool's, as `sandstack lock` on the branch does.
        shutil.copy(STACKS / f"{stack}.lock", tmp_path / "stacks" / f"pr-{case}.lock")
        assert main(["lock", f"stacks/pr-{case}.yaml", "--stack", stack]) == 0
    return tmp_path


def _run(case: str, fmt: str, capsys) -> str:
    stack, _, extra, status = CASES[case]
    capsys.readouterr()
    code = main(["diff", f"stacks/{stack}.yaml", f"stacks/pr-{case}.yaml", "--stack", stack, "--format", fmt, *extra])
    out = capsys.readouterr()
    assert code == status, out.err
    return out.out


@pytest.mark.parametrize("case", CASES)
def test_the_pull_requests_in_text_markdown_and_json(case: str, tree, capsys):
    outputs = {fmt: _run(case, fmt, capsys) for fmt in EXT}
    for fmt, text in outputs.items():
        _golden(f"pr-{case}.{EXT[fmt]}", text)
    report = json.loads(outputs["json"])
    headline = report["impact"]["capacity"]
    # The headline in every format is one sentence list: impact, then capacity and cost where they apply.
    assert headline in outputs["text"].splitlines()[2 if case != "red-fail-on" else 6]
    assert f"{headline}" in outputs["markdown"]
    if case == "memory-two-hosts":  # the example: sbx-a memory 64 → 80 of 128 GiB
        assert headline == ("Capacity: +32GiB memory reserved; host sbx-a at 80GiB of 128GiB memory.")
        hosts = {h["name"]: h for h in report["reserved"]["hosts"]}
        assert set(hosts) == {"sbx-a", "sbx-b"}
        # Two hosts alike are one row of the capacity table, as they are one box and one details block.
        assert ("| 2 hosts `sbx-a`, `sbx-b` (each) | 20 | 24 of 64 | 64GiB → 80GiB of 128GiB | 96GiB of 1TiB | – |"
                in outputs["markdown"])
    if case == "priced":
        assert report["cost"]["currency"] == "EUR" and report["cost"]["difference"] > 0
        assert report["impact"]["cost"].startswith("Cost: ")
    else:
        assert report["cost"] is None and "Cost:" not in outputs["text"]
    if case == "red-fail-on":
        assert report["verdict"]["failed"] == ["security", "disruption"]
        assert report["verdict"]["passed"] == ["capacity"] and report["verdict"]["exit"] == 3
        assert outputs["markdown"].splitlines()[2] == ("**❌ CI fails (exit 3): --fail-on security, disruption; "
                                                       "passes: capacity**")
    if case == "new-pool":
        assert [p["name"] for p in report["reserved"]["pools"]] == ["scratch"]


def test_every_pull_request_golden_belongs_to_a_case():
    assert {p.name for p in Path(__file__).parent.joinpath("golden").glob("pr-*")} == {
        f"pr-{case}.{ext}" for case in CASES for ext in EXT.values()}
