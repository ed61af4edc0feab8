"""Every file the CLI reads goes through one reader (sandstack.files): a named pipe, a device or a directory is
refused before it is read, a file past the reader's bound is refused after reading just past it, and a bad input is
one line naming the file and what is wrong, exit 2, never a traceback.

The issue's cases: `status --outputs /dev/zero` grew to 9.9 GiB in 6 s, a FIFO there hung it, `--outputs` holding
`[1,2]` and `sandbox status h` ended in tracebacks. The commands run as the console script with a timeout, so a
hang or a memory blow-up is a failure, not a stuck suite; none of them reaches a runtime (the outputs name a port
nothing listens on, and every refusal comes before a request)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spec.helpers import STACKS

CONSOLE_SCRIPT = Path(sys.executable).with_name("sandstack")
DEV = str(STACKS / "dev.yaml")
OUTPUTS = {"hosts": {"local": {"url": "http://127.0.0.1:9", "token": "test-token-0123456789"}},
           "pools": {"python": ["local"]}}
SHAPE = ('(stack outputs are {"hosts": {HOST: {"url", "token"}}, "pools": {POOL: [HOST, ...]}}, as `pulumi stack '
         'output --json --show-secrets` writes them)')

# reader → (argv with {F} for the file, the line's prefix, what the reader says it wants)
READERS = {
    "status --outputs": (["status", "--outputs", "{F}"], "sandstack status: ", "a stack outputs file"),
    "sandbox --outputs": (["sandbox", "--outputs", "{F}", "list"], "sandstack sandbox: ", "a stack outputs file"),
    "exec --script": (["sandbox", "--outputs", "outputs.json", "exec", "local/sandstack-dev-python-0", "--script",
                       "{F}"], "sandstack sandbox: ", "a script"),
    "put SOURCE": (["sandbox", "--outputs", "outputs.json", "put", "local/sandstack-dev-python-0", "in.csv", "{F}"],
                   "sandstack sandbox: ", "a file to upload"),
    "--config": (["diff", DEV, DEV, "--check-hosts", "--config", "{F}"], "sandstack: --config ",
                 "a config file (`pulumi config --show-secrets --json`)"),
    "--accept": (["diff", DEV, DEV, "--accept", "{F}"], "sandstack: ", "a review file"),
    "preview": (["preview", "{F}"], "sandstack: ", "a stack file"),
    "generate --root": (["generate", "--check", "--root", "root"], "sandstack generate: ", "a generated file"),
}
KINDS = {"fifo": "is a named pipe (FIFO), not a regular file: give the path of {what}",
         "device": "is a character device, not a regular file: give the path of {what}",
         "directory": "is a directory, not {what}"}


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(CONSOLE_SCRIPT), *argv], cwd=cwd, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def _place(tmp_path: Path, reader: str, kind: str) -> str:
    """The bad input where `reader` reads it: its path as the command names it."""
    (tmp_path / "outputs.json").write_text(json.dumps(OUTPUTS))
    if reader == "generate --root":
        (tmp_path / "root").mkdir()
        target, shown = tmp_path / "root" / "README.md", "root/README.md"
    else:
        target, shown = tmp_path / "bad", "bad"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "device":
        if reader == "generate --root":
            pytest.skip("a device cannot be put under a folder without root's mknod")
        return "/dev/zero"
    elif kind == "directory":
        if reader in ("preview", "generate --root"):
            pytest.skip("a directory here is a usage answer of its own (tested in tests/spec and test_preview)")
        target.mkdir()
    return shown


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_special_file_is_refused_in_one_line_exit_2(reader, kind, tmp_path):
    shown = _place(tmp_path, reader, kind)
    argv, prefix, what = READERS[reader]
    run = _run([a.replace("{F}", shown) for a in argv], tmp_path)
    assert (run.returncode, run.stderr) == (2, f"{prefix}{shown}: {KINDS[kind].format(what=what)}\n")
    assert reader == "--config" or run.stdout == ""  # diff prints its report before it checks hosts


@pytest.mark.parametrize(("reader", "limit"), [("status --outputs", "16 MiB"), ("exec --script", "4 MiB"),
                                               ("--config", "4 MiB")])
def test_a_file_past_its_reader_s_bound_is_refused_without_reading_it_all(reader, limit, tmp_path):
    (tmp_path / "outputs.json").write_text(json.dumps(OUTPUTS))
    with open(tmp_path / "big", "wb") as handle:  # sparse: 8 GiB on no disk, which a whole read would hold
        handle.truncate(8 << 30)
    argv, prefix, what = READERS[reader]
    run = _run([a.replace("{F}", "big") for a in argv], tmp_path)
    assert (run.returncode, run.stderr) == (2, f"{prefix}big: is larger than the {limit} limit for {what}\n")


@pytest.mark.parametrize(("text", "message"), [
    ("[1,2]", f"$: expected an object, got a list {SHAPE}"),
    ('{"hosts": {"h": {"url": 5, "token": "t"}}, "pools": {}}',
     "$.hosts.h.url: expected the runtime's URL, 'http://…' or 'https://…', got a number " + SHAPE),
    ('{"runtime": {"hosts": {"h": {"url": "http://127.0.0.1:9", "token": "t"}}, "pools": {"p": ["g"]}}}',
     "$.runtime.pools.p: host 'g' is not in $.runtime.hosts"),
    ('{"hosts": {"h": {"url": "http://127.0.0.1:9"}}, "pools": {}}',
     f"$.hosts.h.token: expected the runtime's token, a string, got null {SHAPE}"),
], ids=["a list", "a number for a url", "an unknown host", "no token"])
@pytest.mark.parametrize("command", [["status", "--outputs", "o.json"], ["sandbox", "--outputs", "o.json", "list"]],
                         ids=["status", "sandbox"])
def test_outputs_that_are_not_the_runtime_s_are_one_located_line(command, text, message, tmp_path):
    (tmp_path / "o.json").write_text(text)
    run = _run(command, tmp_path)
    prefix = "sandstack status: " if command[0] == "status" else "sandstack sandbox: "
    assert (run.returncode, run.stdout, run.stderr) == (2, "", f"{prefix}o.json: {message}\n")


def test_outputs_that_are_not_json_are_located_at_the_error(tmp_path):
    (tmp_path / "o.json").write_text('{"hosts": {\n  "h": ,\n}}')
    run = _run(["status", "--outputs", "o.json"], tmp_path)
    assert (run.returncode, run.stderr) == (2, "sandstack status: o.json:2:8: $: is not JSON: Expecting value\n")


@pytest.mark.parametrize("ref", ["local", "local/", "/sandstack-dev-python-0"])
def test_a_sandbox_that_is_not_host_slash_sandbox_is_a_usage_line_not_a_traceback(ref, tmp_path):
    (tmp_path / "outputs.json").write_text(json.dumps(OUTPUTS))
    run = _run(["sandbox", "--outputs", "outputs.json", "status", ref], tmp_path)
    assert (run.returncode, run.stdout, run.stderr) == (
        2, "", f"sandstack sandbox: {ref!r} is not HOST/SANDBOX as a claim prints it, e.g. "
               "'local/sandstack-dev-python-0'\n")


def test_a_git_input_past_the_spec_bound_is_refused_before_it_is_extracted(tmp_path):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=tmp_path, check=True, env=env)
    (tmp_path / "big.yaml").write_bytes(b"#" * (1024 * 1024 + 1))
    subprocess.run(["git", "add", "big.yaml"], cwd=tmp_path, check=True, env=env)
    subprocess.run(["git", "commit", "-q", "-m", "big"], cwd=tmp_path, check=True, env=env)
    run = _run(["preview", "git:main:big.yaml"], tmp_path)
    assert (run.returncode, run.stderr) == (
        2, "sandstack: git:main:big.yaml: is larger than the 1024 KiB limit for a stack file\n")
