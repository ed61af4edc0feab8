"""Fixtures of the spec suite (helpers live in `helpers.py`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from sandstack.spec.errors import Diagnostic
from tests.spec.helpers import check_text


@pytest.fixture
def check(tmp_path: Path) -> Callable[..., list[Diagnostic]]:
    """`check(text)` → every diagnostic of `text` validated as `stack.yaml` in tmp_path."""
    return lambda text, name="stack.yaml": check_text(tmp_path, text, name)
