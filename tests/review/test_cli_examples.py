"""Every example of every command's `--help` runs as written and does what it shows, not only parses
(tests/review/test_cli_help.py): three of `sandbox exec`'s four ran an option as the command (exit 127).

They run where a user would copy them: a git checkout of the repository's stacks, policies and generated files
(branch `main`, and `origin/main`), with the files the examples name (outputs.json, config.json, job.py, input.csv,
old.yaml and new.yaml, a review file) and, for `sandstack sandbox` and `status`, a runtime over the fake backend
(tests/runtime/fake_backend.py) served on this machine's loopback, whose pool `python` has the sandboxes the
examples name. What no test may do is stubbed, and only that: `--check-hosts` would ping the prod stack's remote
Docker daemons, so the probe answers "reachable". The snapshot id in an example is a placeholder: the one the
`snapshot` example printed stands for it. `shell` runs in a subprocess (it reads a terminal's stdin); the rest run
in this process, in an order that gives each the session and files it expects."""

from __future__ import annotations

import glob
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandstack.plan.runtime import PoolRuntime, RuntimeConfig, WritablePath
from sandstack.runtime.app import create_app
from sandstack.runtime.audit import AuditLog
from sandstack.runtime.service import Runtime
from sandstack.tooling import reach
from sandstack.tooling.cli import main
from tests.review.test_cli_help import PARSERS
from tests.runtime.conftest import TOKEN
from tests.runtime.fake_backend import FakeBackend
from tests.runtime.served import serve
from testbed.specs import REPO

REF = "local/sandstack-dev-python-0"
SNAPSHOT_PLACEHOLDER = "local/snap-0123456789abcdef0123456789abcdef"
SANDBOXES = ["sandstack-dev-python-0", "sandstack-dev-python-1"]
# What the examples name, copied from the repository: the stacks and what they ship, policies, and every file
# `generate` writes or reads (so `generate` finds them up to date).
COPIED = ("stacks", "policies", "docs/examples", "docs/ci", "docs/policy-rules.md", "schemas", "package/schema.json",
          "README.md")
MAKEFILE = "test:\n\t@echo test MODE=$(MODE)\nbuild:\n\t@echo built\n"
ORDER = ("claim", "status", "list", "put", "exec", "shell", "get", "rm", "archive", "snapshot", "restore",
         "claim --from-snapshot", "pause", "resume", "audit", "release")


def examples() -> list[str]:
    out = []
    for _, parser in PARSERS:
        out += [line.strip() for line in parser.epilog.splitlines()[1:]]
    return list(dict.fromkeys(out))


def _step(example: str) -> tuple[int, str]:
    """Where an example runs in the scenario: the spec commands first, then the sandbox's life in ORDER."""
    words = shlex.split(example)
    if words[1] != "sandbox":
        return (0 if words[1] != "status" else ORDER.index("audit") + 1, example)
    sub = next(w for w in words[2:] if not w.startswith("-") and not w.endswith(".json"))
    sub = "claim --from-snapshot" if sub == "claim" and "--from-snapshot" in words else sub
    return (1 + ORDER.index(sub), example)


def _git(*args: str, cwd: Path) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", *args], cwd=cwd, check=True, env=env, capture_output=True)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    for name in COPIED:
        source, target = REPO / name, work / name
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copyfile)(source, target)
    # The README's review example: a base and a head that differ.
    shutil.copyfile(REPO / "docs" / "examples" / "review" / "base.yaml", work / "old.yaml")
    shutil.copyfile(REPO / "docs" / "examples" / "review" / "head.yaml", work / "new.yaml")
    (work / "stacks" / "review").mkdir()
    (work / "stacks" / "review" / "prod.yaml").write_text(
        "accept:\n  - change: templates.python.limits.memory\n    category: disruption\n"
        "    reason: the model needs more memory; reviewed\n")
    (work / "config.json").write_text(json.dumps({"sandstack:runtimeToken": {"value": "x", "secret": True}}))
    (work / "job.py").write_text("print('job', 6 * 7)\n")
    (work / "input.csv").write_text("a,b\n1,2\n")
    _git("init", "-q", "-b", "main", cwd=work)
    _git("add", "-A", cwd=work)
    _git("commit", "-q", "-m", "stacks", cwd=work)
    _git("update-ref", "refs/remotes/origin/main", "HEAD", cwd=work)
    return work


@pytest.fixture
def runtime_url(tmp_path: Path):
    writable = (WritablePath("/workspace"), WritablePath("/tmp"))
    config = RuntimeConfig(host="local", pools={"python": PoolRuntime(tuple(SANDBOXES), "/workspace", writable)})
    backend = FakeBackend(tmp_path / "containers", SANDBOXES, {"/workspace": "tmpfs", "/tmp": "tmpfs"})
    workspace = backend.path(SANDBOXES[0], "/workspace")
    (workspace / "Makefile").write_text(MAKEFILE)
    (workspace / "out").mkdir()
    (workspace / "out" / "report.pdf").write_bytes(b"%PDF-1.4 report\n")
    (workspace / "out" / "old.log").write_text("old\n")
    audit = AuditLog(tmp_path / "state" / "audit.log")
    app = create_app(Runtime(config, backend, tmp_path / "state"), token=TOKEN, audit=audit, monitor=False)
    try:
        with serve(app) as url:
            yield url
    finally:
        backend.close()
        audit.close()


def _reachable(hosts, config, timeout):
    return [reach.Reach(name, "stub", host.endpoint) for name, host in sorted(hosts.items())]


def test_every_help_example_runs_as_written(checkout, runtime_url, monkeypatch, capfd):
    (checkout / "outputs.json").write_text(json.dumps({"runtime": {
        "hosts": {"local": {"url": runtime_url, "token": TOKEN}}, "pools": {"python": ["local"]}}}))
    monkeypatch.chdir(checkout)
    monkeypatch.setenv("SANDSTACK_OUTPUTS", "outputs.json")
    monkeypatch.setattr(reach, "check_hosts", _reachable)
    results: dict[str, tuple[int, str, str]] = {}
    snapshot = SNAPSHOT_PLACEHOLDER
    for example in sorted(examples(), key=_step):
        command = example.replace(SNAPSHOT_PLACEHOLDER, snapshot)
        if shlex.split(command)[2:3] == ["shell"]:
            results[example] = _shell(command, checkout)
            continue
        argv = [match for word in shlex.split(command)[1:] for match in (sorted(glob.glob(word)) or [word])]
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"notes from stdin\n")))
        code = main(argv)
        sys.stdout.flush()
        out, err = capfd.readouterr()
        results[example] = (code, out, err)
        if shlex.split(command)[2:3] == ["snapshot"]:
            snapshot = out.strip()
    assert {e: r for e, r in results.items() if r[0] != 0} == {}
    shown = {e: r[1] for e, r in results.items()}
    assert shown["sandstack sandbox --outputs outputs.json claim python chat-1"] == f"{REF}\n"
    assert shown[f"sandstack sandbox exec {REF} -- python3 -c 'print(1)'"] == "1\n"
    assert shown[f"sandstack sandbox exec {REF} --script job.py --lang python --timeout 60"] == "job 42\n"
    assert shown[f"sandstack sandbox exec {REF} --cwd /workspace --env MODE=test -- make test"] == "test MODE=test\n"
    assert shown[f"sandstack sandbox exec {REF} --stream -- make build"] == "built\n"
    assert "shell-42" in shown[f"sandstack sandbox shell {REF}"]
    assert "42" in shown[f"sandstack sandbox shell {REF} -- python3 -i"]
    assert shown[f"sandstack sandbox get {REF} notes.txt"] == "notes from stdin\n"
    assert (checkout / "report.pdf").read_bytes() == b"%PDF-1.4 report\n"
    assert (checkout / "workspace.tar.gz").stat().st_size > 0 and (checkout / "workspace.zip").stat().st_size > 0
    assert snapshot.startswith("local/snap-") and snapshot != SNAPSHOT_PLACEHOLDER
    assert shown[f"sandstack sandbox claim python chat-2 --from-snapshot {SNAPSHOT_PLACEHOLDER}"] == \
        "local/sandstack-dev-python-1\n"
    status = json.loads(shown["sandstack status --outputs outputs.json --format json"])
    assert status["hosts"]["local"]["health"] == "up"
    assert shown["sandstack generate"] == "all generated files are up to date\n"


def _shell(command: str, cwd: Path) -> tuple[int, str, str]:
    """A terminal example, as a shell runs it, its keystrokes on stdin."""
    keys = b"print(6 * 7)\nexit()\n" if "python3" in command else b"echo shell-$((6 * 7)); exit 0\n"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", command], cwd=cwd, input=keys, capture_output=True, timeout=120, env=env)
    return done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")


def test_the_scenario_runs_every_example_of_every_command():
    # A command added with an example it cannot place would be left out of the run above: each has its step.
    assert len(examples()) >= 45
    assert all(_step(e) for e in examples())
