"""`sandstack diff`: what each kind of change does and says, exit statuses, and git inputs."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest

from sandstack.tooling.cli import main
from tests.review.cases import BASE, FILES, pair
from testbed.specs import write_spec


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
    assert "no security-relevant change" in out and "No changes: `pulumi up` would change nothing (24 unchanged)." in out


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


# The gateway takes its new squid config in place: only its reload container runs again.
LISTS = {"sandstack-gpu-1-gateway-reload": "replace", "sandstack-gpu-1-logger-reload": "replace"}


def test_a_widened_allow_list_renews_only_the_gateway_and_the_logging_resolver_and_is_looser(tmp_path, monkeypatch,
                                                                                            capsys):
    data = _case("allow-widened", tmp_path, monkeypatch, capsys)
    assert _actions(data) == LISTS
    assert _security(data) == [("agent", True, "allow entry added: pypi.org")]


def test_a_removed_deny_entry_is_looser(tmp_path, monkeypatch, capsys):
    data = _case("deny-removed", tmp_path, monkeypatch, capsys)
    assert _actions(data) == LISTS
    assert _security(data) == [("agent", True, "deny entry removed: gist.github.com")]


def test_a_port_given_a_url_is_looser_and_adds_the_hosts_ingress(tmp_path, monkeypatch, capsys):
    data = _case("port-url", tmp_path, monkeypatch, capsys)
    # Two new ways in, both named: the port's URL and the ingress that serves it (issue 38, item 6).
    assert _security(data) == [("agent", True, "port 8000/tcp given a URL through the host's ingress (was host)"),
                               ("agent", True, "ingress added on host gpu-1, listening on all its interfaces, port "
                                               "443: its URLs reach url port 8000 of this pool's sandboxes")]
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
    assert _actions(data) == {"sandstack-gpu-1-guard-reload": "replace", "sandstack-agent.gpu-1-3": "create",
                              "sandstack-agent.gpu-1-4": "create"}


def test_replicas_down_to_zero_delete_the_pools_sandboxes(tmp_path, monkeypatch, capsys):
    data = _case("replicas-zero", tmp_path, monkeypatch, capsys)
    assert _actions(data) == {"sandstack-gpu-1-guard-reload": "replace", "sandstack-shell.gpu-1-0": "delete",
                              "sandstack-shell.gpu-1-1": "delete"}


def test_a_host_added_creates_its_objects_and_removed_deletes_them(tmp_path, monkeypatch, capsys):
    added = _case("host-added", tmp_path, monkeypatch, capsys)
    objects = {"sandstack-gpu-2-provider", "sandstack-gpu-2-infra", "sandstack-gpu-2-guard-state",
               "sandstack-gpu-2-guard-container", "sandstack-gpu-2-guard-config", "sandstack-gpu-2-guard-reload",
               "sandstack-gpu-2-net.shell", "sandstack-shell.gpu-2-image",
               "sandstack-shell.gpu-2-0", "sandstack-shell.gpu-2-1"}
    assert _actions(added) == {name: "create" for name in objects}
    removed = _case("host-removed", tmp_path / "r", monkeypatch, capsys)
    assert _actions(removed) == {name: "delete" for name in objects}


def test_raised_memory_updates_in_place_and_raised_cpus_replace(tmp_path, monkeypatch, capsys):
    data = _case("limits-raised", tmp_path, monkeypatch, capsys)
    assert _actions(data) == {s: "update" for s in AGENTS}
    # A memory raise is capacity, not a loosening (issue 21): the security summary says nothing of it.
    assert _security(data) == []
    assert [(f["path"], f["category"]) for f in data["fields"]] == [("templates.agent.limits.memory", "capacity")]
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
    # A widened allow-list is taken in place by the gateway and the logger: it replaces nothing.
    ("allow-widened", "security", 3), ("allow-widened", "replace", 0), ("limits-raised", "replace", 0),
    ("version-bumped", "security", 0), ("version-bumped", "replace", 3),
    # A resized pool creates sandboxes and the guard takes the new pids and rules in place: nothing is replaced.
    ("pool-resized", "replace", 0),
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


def _committed_base(tmp_path: Path) -> Path:
    """A git repository whose `main` holds the base stack at stacks/stack.yaml."""
    repo = tmp_path / "repo"
    write_spec(repo / "stacks", BASE, FILES)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "base")
    return repo


def test_git_inputs_are_read_without_touching_the_work_tree(tmp_path, monkeypatch, capsys):
    repo = _committed_base(tmp_path)
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
    repo = _committed_base(tmp_path)
    monkeypatch.chdir(repo)
    assert main(["preview", source]) == 2
    assert capsys.readouterr().err == message.format(repo=repo.resolve())


@pytest.mark.parametrize("user", ["root", "root:root", "0", "0:0"])
def test_the_root_user_by_name_or_uid_is_looser(user, tmp_path, monkeypatch, capsys):
    base, head = pair("user-root")
    head["templates"]["shell"]["user"] = user
    code, data, err = _diff(tmp_path, monkeypatch, capsys, base, head, "--format", "json")
    assert (code, err) == (0, "")
    assert _security(data) == [("shell", True, f"user 10001:10001 → {user}")]


def test_protocols_any_makes_egress_direct_and_back_through_the_gateway_is_tighter(tmp_path, monkeypatch, capsys):
    data = _case("protocols-any", tmp_path, monkeypatch, capsys)
    assert _security(data) == [
        ("shell", True, "egress of template shell made direct for any protocol (every connection logged)")]
    data = _case("protocols-http", tmp_path / "back", monkeypatch, capsys)
    assert _security(data) == [
        ("shell", False, "egress of template shell back through the gateway (HTTP only, every request logged)")]


def _reasons(data: dict) -> dict[str, list[str]]:
    return {r["name"]: [c["path"] for c in r["reasons"]] for r in data["resources"]
            if not r["type"].startswith("sandstack:index:")}


def test_a_reason_is_listed_only_where_its_effect_under_its_condition_reaches(tmp_path, monkeypatch, capsys):
    # Exposure host → public is not "to or from url": it replaces the sandboxes and renews no host object.
    base, head = pair("port-public")
    head["pools"]["shell"]["replicas"] = 3
    code, data, err = _diff(tmp_path, monkeypatch, capsys, base, head, "--format", "json")
    assert (code, err) == (0, "")
    assert _reasons(data) == {
        "sandstack-gpu-1-guard-reload": ["pools.shell.replicas"],
        **{s: ["templates.agent.ports.0.exposure"] for s in AGENTS},
        "sandstack-shell.gpu-1-2": ["pools.shell.replicas"],
    }


def test_created_objects_name_only_their_placement_and_own_entries(tmp_path, monkeypatch, capsys):
    # A field added elsewhere (a default no template takes, a setting of a template) explains no new host.
    base, head = pair("host-added")
    head["defaults"] = {"base_image": "busybox:1.36"}
    head["templates"]["shell"]["workdir"] = "/work"
    code, data, err = _diff(tmp_path, monkeypatch, capsys, base, head, "--format", "json")
    assert (code, err) == (0, "")
    reasons = _reasons(data)
    placed = ["hosts.gpu-2", "pools.shell.hosts"]
    assert reasons["sandstack-gpu-2-provider"] == placed
    assert reasons["sandstack-shell.gpu-2-0"] == placed
    assert reasons["sandstack-shell.gpu-1-0"] == ["templates.shell.workdir"]
    assert {name for name, why in reasons.items() if "defaults.base_image" in why} == set()


def test_more_replicas_reload_the_runtime_service_whose_configuration_counts_them(tmp_path, monkeypatch, capsys):
    # The runtime service's configuration counts each pool's sandboxes: `replicas` declares the runtime's reload
    # for a host that runs one (its configuration set; the container stays), and the diff gives that reason.
    base, head = pair("pool-resized")
    for data in (base, head):
        data["hosts"]["gpu-1"]["runtime"] = {"token": {"secret": "runtimeToken"}}
    code, out, err = _diff(tmp_path, monkeypatch, capsys, base, head)
    assert (code, err) == (0, "")
    assert ("    ~ reload runtime sandstack-gpu-1-runtime-reload\n"
            "        pools: agent: {sandboxes=3, workspace=/tmp, idle=pause after 900s} → "
            "{sandboxes=5, workspace=/tmp, idle=pause after 900s}\n"
            "        because pools.agent.replicas: 3 → 5 [") in out
    assert "runtime sandstack-gpu-1-runtime-container" not in out
    assert "reason not declared" not in out


def test_a_changed_snapshot_file_is_the_reason_its_image_rebuilds(tmp_path, monkeypatch, capsys):
    write_spec(tmp_path / "base", BASE, FILES)
    write_spec(tmp_path / "head", BASE, {"files/tool.sh": "echo tool v2\n"})
    monkeypatch.chdir(tmp_path)
    assert main(["diff", "base/stack.yaml", "head/stack.yaml", "--stack", "prod"]) == 0
    out = capsys.readouterr().out
    because = ("        because templates.agent.snapshot.files: /usr/local/bin/tool: sha256 dbdf94a50c89 → "
               "sha256 d7764d37802a [rebuild]  # forces replacement\n")
    assert "  template agent on host gpu-1 rebuilds: files changed  (changed WITHOUT a version bump)\n" in out
    assert "  -/+ snapshot sandstack-agent.gpu-1-image\n" in out and out.count(because) == 2
    assert "reason not declared" not in out


def test_a_directory_is_not_a_stack_file_exit_2(tmp_path, monkeypatch, capsys):
    (tmp_path / "stacks").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["diff", "stacks", "stacks"]) == 2
    assert capsys.readouterr().err == "sandstack: stacks: is a directory; give a stack file, e.g. stacks/prod.yaml\n"


def test_a_git_tree_is_not_a_stack_file_exit_2(tmp_path, monkeypatch, capsys):
    repo = _committed_base(tmp_path)
    monkeypatch.chdir(repo)
    assert main(["preview", "git:HEAD:stacks"]) == 2
    assert capsys.readouterr().err == ("sandstack: git:HEAD:stacks: stacks is a directory at HEAD; give a stack "
                                       "file in it, e.g. git:HEAD:stacks/prod.yaml\n")


@pytest.mark.parametrize("command", [["preview", "a.yaml"], ["diff", "a.yaml", "b.yaml"]])
def test_a_stack_name_outside_the_pattern_is_refused_exit_2(command, capsys):
    with pytest.raises(SystemExit) as stop:
        main([*command, "--stack", "Bad Name"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"sandstack {command[0]}: error: argument --stack: 'Bad Name' is not a stack name: letters, digits, '-', "
        "'_' and '.', starting with a letter or digit, at most 100 characters "
        "(pattern ^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$)")


def test_ctrl_c_prints_one_line_and_exits_130(monkeypatch, capsys):
    from sandstack.tooling import review

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(review, "diff", interrupted)
    assert main(["diff", "a.yaml", "b.yaml"]) == 130
    assert capsys.readouterr() == ("", "sandstack: interrupted\n")


def test_a_replace_that_no_declared_effect_explains_says_so_instead_of_inventing_a_reason():
    from sandstack.review.diff import Diff, ResourceChange
    from sandstack.review.diff_report import to_text
    from sandstack.review.resources import Resource

    runtime = Resource("sandstack-gpu-1-runtime-container", "docker:index/container:Container", None, "runtime",
                       host="gpu-1")
    text = to_text(Diff([], [ResourceChange(runtime, "replace", {"envs": ("a", "b")})], []), "base", "head")
    assert "  -/+ runtime sandstack-gpu-1-runtime-container\n" in text
    assert "        reason not declared in the change table\n" in text


def test_raising_a_direct_routes_connection_bound_is_looser_and_lowering_one_tighter(tmp_path, monkeypatch, capsys):
    base = copy.deepcopy(BASE)
    base["templates"]["shell"]["network"] = {"egress": "allow-all", "protocols": "any"}
    head = copy.deepcopy(base)
    head["templates"]["shell"]["network"]["connections"] = {"rate": 300, "open": 64}
    code, data, err = _diff(tmp_path, monkeypatch, capsys, base, head, "--format", "json")
    assert (code, err) == (0, "")
    assert _security(data) == [("shell", True, "new connections a second per sandbox 100 → 300"),
                               ("shell", False, "open connections per sandbox 1024 → 64")]
    # Only the guard's rules carry the bounds: it takes them in place.
    assert _actions(data) == {"sandstack-gpu-1-guard-reload": "replace"}
