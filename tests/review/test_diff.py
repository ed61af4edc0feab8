"""`sandstack diff`: what each kind of change does and says, exit statuses, and git inputs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sandstack.tooling.cli import main
from tests.review.cases import BASE, FILES, pair
from tests.support.specs import write_spec


def _diff(tmp_path: Path, monkeypatch, capsys, base: dict, head: dict, *extra: str) -> tuple[int, dict | str, str]:
    write_spec(tmp_path / "base", base, FILES)
    write_spec(tmp_path / "head", head, FILES)
    monkeypatch.chdir(tmp_path)
    code = main(["diff", "base/stack.yaml", "head/stack.yaml", "--stack", "prod", *extra])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if "json" in extra and out.out else out.out), out.err


def _case(case: str, tmp_path, monkeypatch, capsys) -> dict:
    code, data, err = _diff(tmp_path, monkeypatch, capsys, *pair(case), "--format", "json")
    assert (code, err) == (0, "")
    return data


def _actions(data: dict) -> dict[str, str]:
    return {r["name"]: r["action"] for r in data["resources"] if not r["type"].startswith("sandstack:index:")}


def _security(data: dict) -> list[tuple[str, bool, str]]:
    return [(f["pool"], f["loosens"], f["text"]) for f in data["security"]]


AGENTS = [f"sandstack-agent.gpu-1-{i}" for i in range(3)]


def test_nothing_changed_says_so_and_exits_0(tmp_path, monkeypatch, capsys):
    code, out, err = _diff(tmp_path, monkeypatch, capsys, BASE, BASE, "--fail-on", "replace", "--fail-on", "security")
    assert (code, err) == (0, "")
    assert "no security-relevant change" in out and "No changes: `pulumi up` would change nothing." in out


def test_a_bumped_version_rebuilds_the_snapshot_and_replaces_its_sandboxes(tmp_path, monkeypatch, capsys):
    data = _case("version-bumped", tmp_path, monkeypatch, capsys)
    assert _actions(data) == {"sandstack-agent.gpu-1-image": "replace", **{s: "replace" for s in AGENTS}}
    assert data["snapshots"] == [{"host": "gpu-1", "template": "agent", "why": ["version 1 → 2"], "unbumped": False}]
    assert _security(data) == []


def test_setup_changed_without_a_bump_is_called_out(tmp_path, monkeypatch, capsys):
    data = _case("setup-without-bump", tmp_path, monkeypatch, capsys)
    assert data["snapshots"] == [{"host": "gpu-1", "template": "agent", "why": ["setup changed"], "unbumped": True}]
    sandbox = next(r for r in data["resources"] if r["name"] == AGENTS[0])
    assert [(r["path"], r["effect"]) for r in sandbox["reasons"]] == [("templates.agent.snapshot.setup", "rebuild")]


def test_a_widened_allow_list_renews_only_the_gateway_and_is_looser(tmp_path, monkeypatch, capsys):
    data = _case("allow-widened", tmp_path, monkeypatch, capsys)
    assert _actions(data) == {"sandstack-gpu-1-gateway-container": "replace"}
    assert _security(data) == [("agent", True, "allow entry added: pypi.org")]


def test_a_removed_deny_entry_is_looser(tmp_path, monkeypatch, capsys):
    data = _case("deny-removed", tmp_path, monkeypatch, capsys)
    assert _actions(data) == {"sandstack-gpu-1-gateway-container": "replace"}
    assert _security(data) == [("agent", True, "deny entry removed: gist.github.com")]


def test_a_port_given_a_url_is_looser_and_adds_the_hosts_ingress(tmp_path, monkeypatch, capsys):
    data = _case("port-url", tmp_path, monkeypatch, capsys)
    assert _security(data) == [("agent", True, "port 8000/tcp given a URL through the host's ingress (was host)")]
    actions = _actions(data)
    assert {s: actions[s] for s in AGENTS} == {s: "replace" for s in AGENTS}
    assert actions["sandstack-gpu-1-ingress-container"] == "create"


def test_a_port_made_public_replaces_the_sandboxes_and_is_looser(tmp_path, monkeypatch, capsys):
    data = _case("port-public", tmp_path, monkeypatch, capsys)
    assert _actions(data) == {s: "replace" for s in AGENTS}
    assert _security(data) == [("agent", True, "port 8000/tcp made public (was host)")]
    changed = next(r for r in data["resources"] if r["name"] == AGENTS[0])["changed"]
    assert changed["ports"]["new"] == [{"external": None, "internal": 8000, "ip": "0.0.0.0", "protocol": "tcp"}]


def test_a_resized_pool_creates_sandboxes_and_renews_the_guard(tmp_path, monkeypatch, capsys):
    data = _case("pool-resized", tmp_path, monkeypatch, capsys)
    assert _actions(data) == {"sandstack-gpu-1-guard-container": "replace", "sandstack-agent.gpu-1-3": "create",
                              "sandstack-agent.gpu-1-4": "create"}


def test_replicas_down_to_zero_delete_the_pools_sandboxes(tmp_path, monkeypatch, capsys):
    data = _case("replicas-zero", tmp_path, monkeypatch, capsys)
    assert _actions(data) == {"sandstack-gpu-1-guard-container": "replace", "sandstack-shell.gpu-1-0": "delete",
                              "sandstack-shell.gpu-1-1": "delete"}


def test_a_host_added_creates_its_objects_and_removed_deletes_them(tmp_path, monkeypatch, capsys):
    added = _case("host-added", tmp_path, monkeypatch, capsys)
    objects = {"sandstack-gpu-2-provider", "sandstack-gpu-2-infra", "sandstack-gpu-2-guard-state",
               "sandstack-gpu-2-guard-container", "sandstack-gpu-2-net.shell", "sandstack-shell.gpu-2-image",
               "sandstack-shell.gpu-2-0", "sandstack-shell.gpu-2-1"}
    assert _actions(added) == {name: "create" for name in objects}
    removed = _case("host-removed", tmp_path / "r", monkeypatch, capsys)
    assert _actions(removed) == {name: "delete" for name in objects}


def test_raised_memory_updates_in_place_and_raised_cpus_replace(tmp_path, monkeypatch, capsys):
    data = _case("limits-raised", tmp_path, monkeypatch, capsys)
    assert _actions(data) == {s: "update" for s in AGENTS}
    assert _security(data) == [("agent", True, "memory 1073741824 → 4294967296")]
    data = _case("cpus-raised", tmp_path / "c", monkeypatch, capsys)
    assert _actions(data) == {s: "replace" for s in AGENTS}
    sandbox = next(r for r in data["resources"] if r["name"] == AGENTS[0])
    assert sandbox["reasons"] == [{"path": "templates.agent.limits.cpus", "old": 1.0, "new": 2.0, "effect": "replace"}]


def test_a_re_pointed_secret_shows_keys_only(tmp_path, monkeypatch, capsys):
    data = _case("secret-repointed", tmp_path, monkeypatch, capsys)
    assert _actions(data) == {s: "replace" for s in AGENTS}
    assert _security(data) == [("agent", True, "secret re-pointed: env GITHUB_TOKEN `githubToken` → `githubTokenV2`")]


def test_a_capability_added_and_root_user_are_looser(tmp_path, monkeypatch, capsys):
    data = _case("capability-added", tmp_path, monkeypatch, capsys)
    assert _security(data) == [("shell", True, "capability NET_BIND_SERVICE added"),
                               ("shell", True, "user 10001:10001 → 0:0")]


def test_runsc_to_runc_is_looser(tmp_path, monkeypatch, capsys):
    data = _case("runtime-changed", tmp_path, monkeypatch, capsys)
    assert _actions(data) == {s: "replace" for s in AGENTS}
    assert _security(data) == [("agent", True, "runtime runsc → runc")]


@pytest.mark.parametrize(("case", "fail_on", "code"), [
    ("allow-widened", "security", 3), ("allow-widened", "replace", 3), ("limits-raised", "replace", 0),
    ("version-bumped", "security", 0), ("version-bumped", "replace", 3), ("pool-resized", "replace", 3),
])
def test_fail_on_gates_exit_3(case, fail_on, code, tmp_path, monkeypatch, capsys):
    assert _diff(tmp_path, monkeypatch, capsys, *pair(case), "--fail-on", fail_on)[0] == code


def test_an_invalid_head_prints_located_errors_and_exits_1(tmp_path, monkeypatch, capsys):
    head = {**BASE, "pools": {**BASE["pools"], "agent": {**BASE["pools"]["agent"], "replicas": -1}}}
    code, out, err = _diff(tmp_path, monkeypatch, capsys, BASE, head)
    assert code == 1 and out == ""
    assert err.startswith("head/stack.yaml is not a valid sandstack spec:\n")
    assert "$.pools.agent.replicas" in err and "Traceback" not in err


def test_a_missing_file_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["diff", "nope.yaml", "nope.yaml"]) == 2
    assert capsys.readouterr().err == "sandstack: nope.yaml: no such file\n"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo, check=True,
                   capture_output=True)


def test_git_inputs_are_read_without_touching_the_work_tree(tmp_path, monkeypatch, capsys):
    repo = tmp_path / "repo"
    write_spec(repo / "stacks", BASE, FILES)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "base")
    _, head = pair("allow-widened")
    write_spec(repo / "stacks", head, FILES)  # uncommitted: the work tree is HEAD of the review
    monkeypatch.chdir(repo)
    code = main(["diff", "git:main:stacks/stack.yaml", "stacks/stack.yaml", "--format", "json", "--stack", "prod"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and _security(data) == [("agent", True, "allow entry added: pypi.org")]
    assert (repo / "stacks" / "stack.yaml").read_text().count("pypi.org") == 1  # untouched
    assert main(["preview", "git:main:stacks/stack.yaml", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["stack"] == "stack"


@pytest.mark.parametrize(("source", "message"), [
    ("git:nope:stacks/stack.yaml", "sandstack: git:nope:stacks/stack.yaml: no commit 'nope' in {repo}\n"),
    ("git:main:stacks/missing.yaml", "sandstack: git:main:stacks/missing.yaml: stacks/missing.yaml does not exist at main\n"),
    ("git:main", "sandstack: git:main: write git inputs as git:REF:PATH, e.g. git:main:stacks/prod.yaml\n"),
])
def test_a_missing_ref_or_path_is_a_clear_error_exit_2(source, message, tmp_path, monkeypatch, capsys):
    repo = tmp_path / "repo"
    write_spec(repo / "stacks", BASE, FILES)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "base")
    monkeypatch.chdir(repo)
    assert main(["preview", source]) == 2
    assert capsys.readouterr().err == message.format(repo=repo.resolve())
