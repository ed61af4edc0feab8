"""The review decides every condition the change table declares, and the markdown diff fits a PR comment."""

from __future__ import annotations


import pytest

from benchmarks.stacks import SIZES, write_pair
from sandstack.plan.changes import _all_effects
from sandstack.review import diff_report
from sandstack.review.diff import diff
from sandstack.review.reasons import CONDITIONS
from sandstack.spec import load_stack
from sandstack.spec.models import Stack
from sandstack.spec.models.base import change_of
from sandstack.spec.walk import model_fields
from tests.review.cases import FILES, pair
from testbed.specs import write_spec


def test_every_declared_condition_is_decided_by_the_review():
    declared = {cond for info in model_fields(Stack).values() for e in _all_effects(change_of(info))
                for cond, _ in e.when}
    assert declared - set(CONDITIONS) == set(), "add the condition to sandstack.review.reasons.CONDITIONS"
    assert set(CONDITIONS) - declared == set(), "a condition the models no longer declare"


@pytest.fixture(scope="module")
def large_diff(tmp_path_factory):
    """1,000 sandboxes (100 pools on 10 hosts), every template's CPUs raised: 1,000 replaced sandboxes."""
    base, head = write_pair(SIZES["1000"], tmp_path_factory.mktemp("large"))
    return diff(load_stack(base), load_stack(head), "bench")


def test_the_markdown_of_1000_sandboxes_fits_a_pull_request_comment(large_diff):
    text = diff_report.to_markdown(large_diff, "base.yaml", "head.yaml")
    assert len(text) <= diff_report.MARKDOWN_BUDGET < 65_536
    # The security summary is kept whole: one line per pool.
    assert text.count("⚠️ **looser** — pool `p") == 100 and "**Security:** 100 loosening(s), 0 tightening(s)" in text
    assert "**Resources: 1000 replaced.**" in text
    shown = text.count("\n- 1 sandboxes of pool") + text.count("\n- sandbox `")
    assert text.count("<details>") == text.count("</details>") >= 1
    assert f"\n… {1000 - shown} more resources; run `sandstack diff --format text` locally\n" in text
    assert 0 < shown < 1000


def test_what_does_not_fit_is_counted_whole_hosts_first(tmp_path):
    base, head = pair("pool-resized")
    a = load_stack(write_spec(tmp_path / "base", base, FILES))
    b = load_stack(write_spec(tmp_path / "head", head, FILES))
    result = diff(a, b, "prod")
    full = diff_report.to_markdown(result, "base", "head")
    assert "more resource" not in full
    head_part = full.split("\n<details>")[0]
    tight = diff_report.to_markdown(result, "base", "head", budget=len(full) - 1)
    assert tight == (
        head_part + "\n<details><summary>host <code>gpu-1</code>: 2 change(s), 1 shown</summary>\n\n"
        "- guard `sandstack-gpu-1-guard-container` replaced\n"
        + full.split("- guard `sandstack-gpu-1-guard-container` replaced\n")[1].split("- 2 sandboxes")[0]
        + "\n</details>\n\n… 2 more resources; run `sandstack diff --format text` locally\n"
        + "\n" + full.split("\n\n")[-1])
    nothing = diff_report.to_markdown(result, "base", "head", budget=len(head_part))
    assert "<details>" not in nothing and "\n… 3 more resources; run `sandstack diff --format text` locally\n" in nothing
