"""Reproducible installs: scripts/test installs every package from scripts/constraints.txt.

pyproject.toml keeps ranges (what sandstack works with); the lock pins the one set CI runs (`bash scripts/lock`
regenerates it). A fresh clone then installs what the last green run installed, not whatever was released since.
"""

from __future__ import annotations

import os
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "scripts" / "constraints.txt"


def _pins() -> dict[str, Version]:
    pins = {}
    for number, line in enumerate(LOCK.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and version, f"{LOCK.name}:{number}: {line!r} is not 'name==version'"
        pins[canonicalize_name(name)] = Version(version)
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = [r for group in project["optional-dependencies"].values() for r in group]
    return [Requirement(r) for r in project["dependencies"] + extras]


def test_every_declared_dependency_is_pinned_within_its_range():
    pins = _pins()
    for requirement in _declared():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement} is not in {LOCK.name}: run `bash scripts/lock` and commit"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{LOCK.name} pins {name}=={pins[name]}, outside pyproject.toml's {requirement}: run `bash scripts/lock`")


def test_every_installed_dependency_is_pinned():
    """What the declared packages pull in is pinned too (a transitive release can break a fresh clone as well)."""
    pins = _pins()
    seen, todo = set(), [canonicalize_name(r.name) for r in _declared()]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # an extra this environment did not install (e.g. crossguard outside the test venv)
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(requirement.name))
    missing = sorted(name for name in seen if name not in pins and _installed(name))
    assert not missing, f"installed but not pinned in {LOCK.name}: {missing}; run `bash scripts/lock` and commit"


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(os.environ.get("SANDSTACK_LOCKED") != "1",
                    reason="only where scripts/test installed from the lock (SANDSTACK_LOCKED=1)")
def test_the_environment_is_the_lock():
    wrong = {}
    for name, version in _pins().items():
        installed = Version(metadata.version(name)) if _installed(name) else "nothing"
        if installed != version:
            wrong[name] = f"{installed} installed, {version} pinned"
    assert not wrong, wrong
