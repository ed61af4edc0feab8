"""Fixtures of the component suite: `build` (a spec built once under the recording mocks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.components.helpers import Built


@pytest.fixture
def build(tmp_path: Path):
    """`build(spec_dict, files=None, secret_config=None)` → Built: the spec written in tmp_path, run under mocks."""
    def run(data: dict, files: dict[str, str] | None = None, **kwargs) -> Built:
        return Built.from_spec(tmp_path / "spec", data, files, **kwargs)
    return run
