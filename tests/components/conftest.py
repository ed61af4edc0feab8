"""Fixtures of the component suite: the engine harness's (dry_harness, recording_mocks) and `build`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.components.helpers import Built, stack_program, write_spec

# dry_harness, recording_mocks (docker_harness too, unused here) and the harness's coverage hooks.
from tests.engine.harness.fixtures import *  # noqa: E402,F401,F403


@pytest.fixture
def build(tmp_path: Path):
    """`build(spec_dict, files=None, secret_config=None)` → Built: the spec written in tmp_path, run under mocks."""
    def run(data: dict, files: dict[str, str] | None = None, **kwargs) -> Built:
        return Built.from_spec(tmp_path / "spec", data, files, **kwargs)
    return run


@pytest.fixture
def up(dry_harness, tmp_path):
    """`up(spec_dict)` → RunResult: writes the spec and runs the program once more on the same state."""
    path = tmp_path / "spec" / "stack.yaml"

    def run(data: dict):
        write_spec(path.parent, data)
        return dry_harness.run(stack_program(path))
    return run
