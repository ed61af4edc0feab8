"""Ctrl-C at any moment of `sandstack`, its imports included, exits 130 with one line and no traceback.

The command's imports take a few hundred milliseconds (more on a busy machine), and a KeyboardInterrupt inside them
came out of the console script as a traceback. These tests run the console script that pip writes for a user's
install (the wheel, in a fresh venv), so the only code that runs before sandstack's is Python's and pip's wrapper.
(In an editable install, setuptools' import hook runs while Python starts, before any of sandstack's code: an
interrupt then is Python's, with its traceback.)

- The first test is exact: it interrupts the command at a chosen import (an import hook raises SIGINT when the
  module is looked up), one process per module, whatever the machine's speed.
- The second sends SIGINT from outside at several delays, as a user would; it asserts no timing, only what each
  process printed and how it ended. A process the signal killed before Python installed its handler ends by the
  signal (returncode -2), which a shell reports as 130 too. An interrupt that came before any of sandstack's code
  ran (its traceback has no frame in sandstack's files) is Python's own and is not counted.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STACKS = [str(REPO / "stacks" / "dev.yaml"), str(REPO / "stacks" / "prod.yaml")]
INTERRUPTED = "sandstack: interrupted\n"

# Runs the console script as its shebang would, with an import hook that raises SIGINT in this process when the
# module named by argv[1] is looked up: the interrupt arrives in the middle of that import, in the import's own code,
# (argv[2] "finalizer") inside an object's finalizer, where Python prints an exception and goes on, or ("wrapped")
# inside code that turns it into an error of its own.
INTERRUPT_AT_IMPORT = """
import os, runpy, signal, sys

class Finalized:
    def __del__(self):
        signal.raise_signal(signal.SIGINT)

class InterruptAt:
    def __init__(self, module, where):
        self.module, self.where = module, where

    def find_spec(self, name, path=None, target=None):
        if name == self.module:
            sys.meta_path.remove(self)
            if self.where == "finalizer":  # where Python cannot raise: the KeyboardInterrupt is "ignored"
                Finalized()
            elif self.where == "wrapped":  # compiled code that turns it into its own error, as pydantic-core does
                try:
                    signal.raise_signal(signal.SIGINT)
                except KeyboardInterrupt:
                    raise RuntimeError('Error building "literal" validator: KeyboardInterrupt') from None
            else:
                signal.raise_signal(signal.SIGINT)
        return None

sys.meta_path.insert(0, InterruptAt(sys.argv[1], sys.argv[2]))
script = sys.argv[3]
sys.argv = sys.argv[3:]
sys.path[0] = os.path.dirname(script)  # as when the script runs by its shebang
runpy.run_path(script, run_name="__main__")
"""


@pytest.mark.parametrize("module", [
    "sandstack.tooling.cli",  # the CLI itself, which imports the rest
    "rich.console",
    "pydantic",
    "yaml",
    "sandstack.spec.models",
    "sandstack.policy.runner",  # imported once `check` has started: the interrupt unwinds through its code
])
def test_an_interrupt_during_any_import_exits_130_with_one_line(wheel_venv, tmp_path, module):
    run = subprocess.run([str(wheel_venv / "bin" / "python"), "-c", INTERRUPT_AT_IMPORT, module, "import",
                          str(wheel_venv / "bin" / "sandstack"), "check", *STACKS],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert (run.returncode, run.stdout, run.stderr) == (130, "", INTERRUPTED)


@pytest.mark.parametrize("module", ["sandstack.spec.models", "sandstack.policy.runner"])
def test_an_interrupt_compiled_code_turned_into_its_own_error_exits_130_with_one_line(wheel_venv, tmp_path, module):
    """pydantic-core, building a model's validator, catches a KeyboardInterrupt raised in a callback and raises a
    SchemaError whose message names it (a clean-clone CI run printed its traceback)."""
    run = subprocess.run([str(wheel_venv / "bin" / "python"), "-c", INTERRUPT_AT_IMPORT, module, "wrapped",
                          str(wheel_venv / "bin" / "sandstack"), "check", *STACKS],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert (run.returncode, run.stdout, run.stderr) == (130, "", INTERRUPTED)


@pytest.mark.parametrize("module", ["sandstack.spec.models", "sandstack.policy.runner"])
def test_an_interrupt_python_cannot_raise_is_delivered_again(wheel_venv, tmp_path, module):
    """A KeyboardInterrupt inside a finalizer (or a weakref callback, or compiled code's callback) is printed as
    "Exception ignored" and lost; once the command works, sandstack delivers it again where it can unwind."""
    run = subprocess.run([str(wheel_venv / "bin" / "python"), "-c", INTERRUPT_AT_IMPORT, module, "finalizer",
                          str(wheel_venv / "bin" / "sandstack"), "check", *STACKS],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert (run.returncode, run.stdout, run.stderr) == (130, "", INTERRUPTED)


def _before_sandstack(err: str) -> bool:
    """A traceback with no frame in sandstack's files: the interrupt came before any of its code ran (Python
    starting and importing `site`, pip's wrapper importing `re`, the import system looking for the console
    script's module along sys.path), where no package can catch it. Or the bare name of the exception, which is
    what Python prints (and exits 1) when the interrupt comes while it reads and compiles the console script,
    before any Python frame exists."""
    return ("Traceback" in err and "site-packages/sandstack/" not in err) or err == "KeyboardInterrupt\n"


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_at_any_delay_after_start_exits_130_without_a_traceback(wheel_venv, tmp_path):
    command = [str(wheel_venv / "bin" / "sandstack"), "check", *STACKS]
    outcomes = []
    for delay in (0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.6, 0.9, 1.3):
        # As from a terminal: SIGINT at its default action when the process starts (a runner started in the
        # background, as CI may be, passes SIGINT on ignored, and an interrupt before sandstack's handler was lost).
        process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   stdin=subprocess.DEVNULL, preexec_fn=_default_sigint)
        time.sleep(delay)
        finished_first = process.poll() is not None
        if not finished_first:
            process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
        if finished_first or _before_sandstack(err):
            continue
        outcomes.append((delay, process.returncode, err))
        assert "Traceback" not in err, f"SIGINT after {delay}s:\n{err}"
        assert process.returncode in (130, -signal.SIGINT), (delay, process.returncode, err)
        if process.returncode == 130:
            assert err.endswith(INTERRUPTED), (delay, err)
    # The interrupt reached sandstack's own handling at least once (not only the signal's default action).
    assert any(code == 130 for _, code, _ in outcomes), outcomes
