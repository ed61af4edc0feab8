"""The documented CI workflow is valid YAML of the shape GitHub Actions reads, and runs the review commands."""

from __future__ import annotations

import yaml

from sandstack.tooling.cli import build_parser
from sandstack.tooling.examples import WORKFLOW
from testbed.specs import REPO


def test_the_workflow_is_valid_and_validates_diffs_and_comments():
    text = (REPO / WORKFLOW).read_text()
    data = yaml.safe_load(text)
    # PyYAML reads the key `on` as True (YAML 1.1); GitHub reads it as "on".
    assert set(data) == {"name", True, "permissions", "jobs"}
    assert data[True] == {"pull_request": {"paths": ["stacks/**"]}}
    assert data["permissions"] == {"contents": "read", "pull-requests": "write", "security-events": "write"}
    steps = data["jobs"]["review"]["steps"]
    assert all(("uses" in s) != ("run" in s) for s in steps)
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "sandstack validate --format github stacks/*.yaml" in runs
    assert 'sandstack diff "$base" "$file" --format markdown --fail-on security' in runs
    assert "fetch-depth: 0" in text  # git: inputs need the base branch
    assert "sandstack check stacks/*.yaml --policy policies/" in runs and "--format sarif" in runs
    upload = next(s for s in steps if s.get("uses", "").startswith("github/codeql-action/upload-sarif"))
    assert upload["with"]["sarif_file"] == "sandstack.sarif"


def test_every_stack_is_diffed_from_the_merge_base_and_an_empty_diff_posts_nothing():
    steps = yaml.safe_load((REPO / WORKFLOW).read_text())["jobs"]["review"]["steps"]
    diff = next(s for s in steps if s.get("id") == "diff")
    # Any change under stacks/ (a snapshot file only, too) diffs every stack file, not only the changed ones.
    assert "for file in stacks/*.yaml; do" in diff["run"] and "git diff --name-only" not in diff["run"]
    assert diff["env"] == {"BASE": "${{ github.base_ref }}"}
    assert 'base_ref=$(git merge-base "origin/$BASE" HEAD)' in diff["run"]
    assert 'base="git:$base_ref:$file"' in diff["run"]
    assert 'if [ -s diff.md ]; then echo "comment=true" >> "$GITHUB_OUTPUT"; fi' in diff["run"]
    comment = next(s for s in steps if s.get("uses", "").startswith("marocchino/sticky-pull-request-comment"))
    assert comment["if"] == "always() && steps.diff.outputs.comment == 'true'"


def test_the_commands_the_workflow_runs_exist_with_those_options():
    parser = build_parser()
    parser.parse_args(["validate", "--format", "github", "a.yaml"])
    parser.parse_args(["diff", "git:origin/main:stacks/a.yaml", "stacks/a.yaml", "--format", "markdown",
                       "--fail-on", "security"])
    parser.parse_args(["preview", "stacks/a.yaml", "--format", "markdown"])
    parser.parse_args(["check", "stacks/a.yaml", "--policy", "p.yaml", "--base", "origin/main", "--format", "sarif"])
