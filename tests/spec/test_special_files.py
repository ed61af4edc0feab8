"""A path that is not a regular file (a named pipe, a device, a socket) is refused at once, exit 2.

Opening a FIFO for reading waits for a writer that never comes: before the fix, `validate` and `check` on one
hung forever. The subprocess tests run the installed console script with a timeout, so today's hang is a failure.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sandstack.tooling.cli import main
from tests.spec.helpers import STACKS

CONSOLE_SCRIPT = Path(sys.executable).with_name("sandstack")
FIFO = "is a named pipe (FIFO), not a regular file: give the path of a spec file"
STACK = str(STACKS / "dev.yaml")


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(CONSOLE_SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(("args", "out", "err"), [
    (["validate", "pipe.yaml"], f"pipe.yaml:1:1: $: {FIFO}\n", "1 file checked, 0 valid, 1 unreadable (1 error)\n"),
    (["check", "pipe.yaml"], f"pipe.yaml:1:1: $: {FIFO}\n1 unreadable input, 0 errors, 0 warnings, 0 suppressed\n", ""),
    (["check", STACK, "--policy", "pipe.yaml"], "", f"pipe.yaml:1:1: $: {FIFO.replace('spec', 'policy')}\n"),
    (["preview", "pipe.yaml"], "",
     "sandstack: pipe.yaml: is a named pipe (FIFO), not a regular file: give the path of a stack file\n"),
    (["diff", STACK, "pipe.yaml"], "",
     "sandstack: pipe.yaml: is a named pipe (FIFO), not a regular file: give the path of a stack file\n"),
], ids=["validate", "check", "check-policy", "preview", "diff"])
def test_a_fifo_is_refused_at_once_exit_2(tmp_path, args, out, err):
    os.mkfifo(tmp_path / "pipe.yaml")
    run = _run(*args, cwd=tmp_path)
    assert (run.returncode, run.stdout, run.stderr) == (2, out, err)


def test_a_character_device_is_refused_not_read_as_an_empty_spec(capsys):
    assert main(["validate", "/dev/null"]) == 2
    assert capsys.readouterr() == (
        "/dev/null:1:1: $: is a character device, not a regular file: give the path of a spec file\n",
        "1 file checked, 0 valid, 1 unreadable (1 error)\n")


def test_a_socket_is_refused(monkeypatch, capsys):
    # A short folder of its own: a socket's path must fit in 108 bytes.
    with tempfile.TemporaryDirectory(prefix="ss-") as folder, socket.socket(socket.AF_UNIX) as server:
        monkeypatch.chdir(folder)
        server.bind("stack.yaml")
        assert main(["validate", "stack.yaml"]) == 2
        assert capsys.readouterr().out == ("stack.yaml:1:1: $: is a socket, not a regular file: give the path of a "
                                           "spec file\n")


def test_a_symlink_to_a_fifo_is_refused_by_what_it_points_to(tmp_path, monkeypatch, capsys):
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "stack.yaml").symlink_to(tmp_path / "pipe")
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "stack.yaml"]) == 2
    assert capsys.readouterr().out == f"stack.yaml:1:1: $: {FIFO}\n"


def test_a_file_swapped_for_a_fifo_after_the_check_does_not_hang(tmp_path, monkeypatch, capsys):
    # The kind is checked again on the open descriptor, which is opened non-blocking: a race that swaps the file
    # for a pipe between the two cannot make the read wait.
    from sandstack import files as loader

    (tmp_path / "stack.yaml").write_text("version: 1\n")
    real_open = loader._open_nonblocking

    def swap_then_open(path, flags):
        os.remove(path)
        os.mkfifo(path)
        return real_open(path, flags)

    def hung(signum, frame):
        raise TimeoutError("the read waited on the pipe")

    monkeypatch.setattr(loader, "_open_nonblocking", swap_then_open)
    monkeypatch.chdir(tmp_path)
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        assert main(["validate", "stack.yaml"]) == 2
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert capsys.readouterr().out == f"stack.yaml:1:1: $: {FIFO}\n"
