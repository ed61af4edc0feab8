"""What a spec change does: successive `pulumi up`s of the real program on the engine harness's dry backend
(the harness keeps state across runs and decides same / update / replace / delete as the provider would).
No Docker is touched; the engine suite applies the same registrations to a real daemon."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.specs import stack_program, write_spec


@pytest.fixture
def up(dry_harness, tmp_path: Path):
    """`up(spec_dict, files=None, secret_config=None)` → RunResult: writes the spec and runs the program once
    more on the same state."""
    folder = tmp_path / "spec"

    def run(data: dict, files: dict[str, str] | None = None, secret_config: dict[str, str] | None = None):
        path = write_spec(folder, data, files)
        return dry_harness.run(stack_program(path), secret_config=secret_config)
    return run
