"""The address lock where a reviewer meets it: `sandstack lock` writes and checks it, every entry point (validate,
check, preview, diff, the Pulumi program) refuses a stale one with the same located message, and `sandstack diff`
between two git revisions reads each side's lock from its revision, so a new pool that collides with an existing
one adds its own objects and replaces nothing."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pulumi
import pytest

from sandstack.plan.network import pool_subnets
from sandstack.program import load
from sandstack.tooling.cli import main
from testbed.specs import spec, write_spec

GATEWAY = {"base_image": "busybox:1.36", "network": {"egress": "allow-list", "allow": ["example.com"]}}
BASE = spec({"web": GATEWAY, "db": {"base_image": "busybox:1.36", "network": {"egress": "deny-all"}}})
STALE = ("stacks/stack.lock:10:5: $.hosts.local.pools: pool '{pool}' on host 'local' has no addresses here: run "
         "`sandstack lock stacks/stack.yaml` to allocate them (no other pool's addresses move)")


def _colliding_with_web() -> str:
    """A pool name that sorts before 'web' and hashes to web's /23 (stack 't'): without the lock it takes it."""
    web = pool_subnets("t", ["web"], "10.213.0.0/16")["web"]
    return next(n for n in (f"p{i}" for i in range(1000)) if pool_subnets("t", [n], "10.213.0.0/16")[n] == web)


def _grown() -> dict:
    data = copy.deepcopy(BASE)
    new = _colliding_with_web()
    data["templates"][new] = GATEWAY
    data["pools"][new] = {"template": new, "hosts": ["local"]}
    return data


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> Path:
    """A repository whose stacks/stack.yaml and its lock are committed; the work tree is its root."""
    root = tmp_path / "repo"
    write_spec(root / "stacks", BASE)
    monkeypatch.chdir(root)
    assert main(["lock", "stacks/stack.yaml", "--stack", "t"]) == 0
    _git(root, "init", "-q", "-b", "main")
    _commit(root, "base")
    return root


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo, check=True,
                   capture_output=True)


def _commit(repo: Path, message: str) -> None:
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", message)


def test_sandstack_lock_writes_checks_and_reports_what_it_allocates_and_frees(repo, capsys):
    capsys.readouterr()
    assert main(["lock", "--check", "stacks/stack.yaml"]) == 0
    assert capsys.readouterr().out == "stacks/stack.lock is up to date\n"
    new = _colliding_with_web()
    write_spec(repo / "stacks", _grown())
    assert main(["lock", "--check", "stacks/stack.yaml"]) == 1
    assert capsys.readouterr().out == STALE.format(pool=new) + "\n"
    before = (repo / "stacks" / "stack.lock").read_text()
    assert main(["lock", "stacks/stack.yaml", "--stack", "t"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote stacks/stack.lock: allocated pool '{new}' on 'local': 10.213.")
    after = (repo / "stacks" / "stack.lock").read_text()
    # Every line of the lock before is still there but the digest: web and db kept their addresses.
    assert set(before.splitlines()[:-1]) <= set(after.splitlines())
    write_spec(repo / "stacks", BASE)
    assert main(["lock", "stacks/stack.yaml", "--stack", "t"]) == 0
    assert capsys.readouterr().out == f"wrote stacks/stack.lock: freed pool '{new}''s addresses on 'local'\n"
    assert (repo / "stacks" / "stack.lock").read_text() == before


def test_a_missing_lock_fails_the_check(tmp_path, monkeypatch, capsys):
    write_spec(tmp_path, BASE)
    monkeypatch.chdir(tmp_path)
    assert main(["lock", "--check", "stack.yaml"]) == 1
    assert capsys.readouterr().out == "stack.lock does not exist: run `sandstack lock stack.yaml` and commit it\n"
    assert not (tmp_path / "stack.lock").exists()


def test_every_entry_point_refuses_a_stale_lock_with_the_same_located_message(repo, capsys):
    write_spec(repo / "stacks", _grown())
    stale = STALE.format(pool=_colliding_with_web())
    capsys.readouterr()
    assert main(["validate", "stacks/stack.yaml"]) == 1
    assert stale in capsys.readouterr().out
    assert main(["check", "stacks/stack.yaml"]) == 1
    assert stale in capsys.readouterr().out
    assert main(["preview", "stacks/stack.yaml"]) == 1
    assert stale in capsys.readouterr().err
    assert main(["diff", "git:main:stacks/stack.yaml", "stacks/stack.yaml"]) == 1
    assert stale in capsys.readouterr().err
    with pytest.raises(pulumi.RunError) as refused:  # the Pulumi program, before it registers anything
        load("stacks/stack.yaml")
    assert stale in str(refused.value)


def test_a_diff_between_revisions_reads_each_sides_lock_so_a_colliding_new_pool_replaces_nothing(repo, capsys):
    new = _colliding_with_web()
    write_spec(repo / "stacks", _grown())
    assert main(["lock", "stacks/stack.yaml", "--stack", "t"]) == 0
    _commit(repo, "a pool whose hashed subnet is web's")
    capsys.readouterr()
    assert main(["diff", "git:main~1:stacks/stack.yaml", "git:main:stacks/stack.yaml", "--stack", "t",
                 "--format", "json"]) == 0
    actions = {r["name"]: r["action"] for r in json.loads(capsys.readouterr().out)["resources"]}
    # The new pool's objects, and the host services a pool placed on the host renews or reloads (its `placement`
    # effect): web's network, gateway port and sandbox, and db's, are as they were.
    assert actions == {f"sandstack-local-net.{new}": "create", f"sandstack-{new}.local": "create",
                       f"sandstack-{new}.local-0": "create", "sandstack-local-guard-reload": "replace",
                       "sandstack-local-gateway-reload": "replace", "sandstack-local-logger-reload": "replace"}
    # Without the head's lock (the same spec in the work tree, its lock gone), web's network and sandbox move.
    (repo / "stacks" / "stack.lock").unlink()
    assert main(["diff", "git:main~1:stacks/stack.yaml", "stacks/stack.yaml", "--stack", "t", "--format", "json"]) == 0
    moved = {r["name"]: r["action"] for r in json.loads(capsys.readouterr().out)["resources"]}
    assert (moved["sandstack-local-net.web"], moved["sandstack-web.local-0"]) == ("replace", "replace")
