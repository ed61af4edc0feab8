"""The documented CI workflows are valid YAML of the shape GitHub Actions reads: the review runs on the stacks, the
policies and the sandstack version, with a read-only token; the comment and the findings are posted by a
`workflow_run` workflow that runs nothing from the pull request (fork pull requests get a read-only token)."""

from __future__ import annotations

import re

import yaml

from sandstack.tooling.cli import build_parser
from sandstack.tooling.examples import COMMENT_WORKFLOW, WORKFLOW
from testbed.specs import REPO


def _load(path) -> dict:
    data = yaml.safe_load((REPO / path).read_text())
    data["on"] = data.pop(True)  # PyYAML reads the key `on` as True (YAML 1.1); GitHub reads it as "on"
    return data


def _steps(data: dict, job: str) -> list[dict]:
    steps = data["jobs"][job]["steps"]
    assert all(("uses" in s) != ("run" in s) for s in steps), "a step has both `uses` and `run`, or neither"
    return steps


def test_the_review_runs_on_stacks_policies_and_the_sandstack_version():
    data = _load(WORKFLOW)
    assert set(data) == {"name", "on", "permissions", "jobs"}
    assert data["on"] == {"pull_request": {"paths": [
        "stacks/**", "policies/**", "pyproject.toml", "scripts/constraints.txt",
        ".github/workflows/sandstack-review.yml"]}}
    # The pinned versions are the ones installed: a change of the lock is a change of what the review runs.
    install = next(s for s in _steps(data, "review") if s.get("name") == "Install sandstack")
    assert install["run"] == "pip install -c scripts/constraints.txt ."


def test_the_review_only_reads_and_leaves_its_results_as_an_artifact():
    data = _load(WORKFLOW)
    assert data["permissions"] == {"contents": "read"}  # what a fork's pull request gets anyway
    steps = _steps(data, "review")
    uses = [s["uses"].split("@")[0] for s in steps if "uses" in s]
    assert "marocchino/sticky-pull-request-comment" not in uses and "github/codeql-action/upload-sarif" not in uses
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()" and upload["with"]["name"] == "sandstack-review"
    assert upload["with"]["path"].split() == ["diff.md", "sandstack.sarif", "pr-number"]
    number = next(s for s in steps if "pr-number" in s.get("run", ""))
    assert number["env"] == {"NUMBER": "${{ github.event.pull_request.number }}"}
    # No expression is pasted into a script (script injection): values reach the shell through `env`.
    assert [s.get("name") for s in steps + _steps(_load(COMMENT_WORKFLOW), "comment") if "${{" in s.get("run", "")] \
        == []
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "sandstack validate --format github stacks/*.yaml" in runs
    assert "sandstack lock --check stacks/*.yaml" in runs
    assert 'sandstack diff "$base" "$file" --format markdown --fail-on security' in runs
    assert "sandstack check stacks/*.yaml --policy policies/" in runs and "--format sarif" in runs
    assert "pull_request_target" in (REPO / WORKFLOW).read_text()  # the header says why not to use it


def test_the_comment_workflow_posts_for_forks_too_and_runs_nothing_from_the_pull_request():
    data = _load(COMMENT_WORKFLOW)
    assert data["on"] == {"workflow_run": {"workflows": [_load(WORKFLOW)["name"]], "types": ["completed"]}}
    assert data["permissions"] == {"contents": "read", "actions": "read", "pull-requests": "write",
                                   "security-events": "write"}
    job = data["jobs"]["comment"]
    assert job["if"] == ("github.event.workflow_run.event == 'pull_request' && "
                         "github.event.workflow_run.conclusion != 'cancelled'")
    steps = _steps(data, "comment")
    uses = [s["uses"].split("@")[0] for s in steps if "uses" in s]
    assert uses == ["actions/download-artifact", "marocchino/sticky-pull-request-comment",
                    "github/codeql-action/upload-sarif"]  # no checkout: nothing of the pull request runs
    download = steps[0]["with"]
    assert download["name"] == "sandstack-review" and download["run-id"] == "${{ github.event.workflow_run.id }}"
    check = next(s for s in steps if s.get("id") == "pr")
    assert check["env"]["SHA"] == "${{ github.event.workflow_run.head_sha }}"
    assert "case \"$number\" in ''|*[!0-9]*)" in check["run"]  # a number, nothing else
    assert re.search(r'gh pr view "\$number" .*--json headRefOid', check["run"])
    assert 'if [ "$head" != "$SHA" ]; then' in check["run"]  # and the pull request whose head was reviewed
    comment = next(s for s in steps if s.get("uses", "").startswith("marocchino/"))
    assert comment["with"] == {"header": "sandstack", "number": "${{ steps.pr.outputs.number }}",
                               "path": "review/diff.md"}
    sarif = next(s for s in steps if s.get("uses", "").startswith("github/codeql-action/upload-sarif"))
    assert sarif["with"]["sarif_file"] == "review/sandstack.sarif"
    assert sarif["with"]["sha"] == "${{ github.event.workflow_run.head_sha }}"


def test_every_stack_is_diffed_from_the_merge_base_and_an_empty_diff_posts_nothing():
    steps = _steps(_load(WORKFLOW), "review")
    diff = next(s for s in steps if s.get("id") == "diff")
    # Any change under stacks/ (a snapshot file only, too) diffs every stack file, not only the changed ones.
    assert "for file in stacks/*.yaml; do" in diff["run"] and "git diff --name-only" not in diff["run"]
    assert diff["env"] == {"BASE": "${{ github.base_ref }}"}
    assert 'base_ref=$(git merge-base "origin/$BASE" HEAD)' in diff["run"]
    assert 'base="git:$base_ref:$file"' in diff["run"]
    assert "fetch-depth: 0" in (REPO / WORKFLOW).read_text()  # git: inputs need the base branch
    comment = _steps(_load(COMMENT_WORKFLOW), "comment")
    assert next(s for s in comment if s.get("id") == "pr")["run"].count('if [ -s review/diff.md ]; then') == 1
    assert next(s for s in comment if s.get("uses", "").startswith("marocchino/"))["if"] == \
        "steps.pr.outputs.comment == 'true'"


def test_the_commands_the_workflow_runs_exist_with_those_options():
    parser = build_parser()
    parser.parse_args(["validate", "--format", "github", "a.yaml"])
    parser.parse_args(["lock", "--check", "a.yaml"])
    parser.parse_args(["diff", "git:origin/main:stacks/a.yaml", "stacks/a.yaml", "--format", "markdown",
                       "--fail-on", "security"])
    parser.parse_args(["preview", "stacks/a.yaml", "--format", "markdown"])
    parser.parse_args(["check", "stacks/a.yaml", "--policy", "p.yaml", "--base", "origin/main", "--format", "sarif"])
