"""What tests/conftest.py sets for the suite's own speed (docs/performance.md, "The no-Docker suite"): bytecode is
written even where PYTHONDONTWRITEBYTECODE is set, for this process and the ones it starts, and what collection made
is frozen out of the garbage collector's passes."""

from __future__ import annotations

import gc
import os
import subprocess
import sys


def test_this_process_and_the_ones_it_starts_write_bytecode():
    assert sys.dont_write_bytecode is False and "PYTHONDONTWRITEBYTECODE" not in os.environ
    started = subprocess.run([sys.executable, "-c", "import sys; print(sys.dont_write_bytecode)"],
                             capture_output=True, text=True, timeout=60)
    assert started.stdout == "False\n"


def test_what_collection_made_is_frozen():
    assert gc.get_freeze_count() > 1000
