"""The packaging suite's shared fixtures: the wheel and sdist built once, and a fresh venv with the wheel installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _copy_tracked(dest: Path) -> None:
    # Tracked files and new ones not yet added (work in progress builds as it would once committed).
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = REPO / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


@pytest.fixture(scope="session")
def dist(tmp_path_factory) -> Path:
    """The wheel and the sdist, built from a copy of the tracked files."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout to know the tracked files")
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("dist")
    _copy_tracked(source)
    for hook in ("build_sdist", "build_wheel"):  # one process each: setuptools keeps state between them
        build = f"from setuptools import build_meta as b; import sys; print(b.{hook}(sys.argv[1]))"
        built = subprocess.run([sys.executable, "-c", build, str(out)], cwd=source, capture_output=True, text=True)
        assert built.returncode == 0, built.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def wheel_venv(dist, tmp_path_factory) -> Path:
    """A fresh venv holding sandstack from the wheel alone, as a user's install does (its `bin/sandstack` is the
    console script pip writes). The dependencies come through a `.pth` line naming this venv's site-packages: a
    bare path, so this venv's editable-install hook does not run there."""
    [wheel] = dist.glob("sandstack-*.whl")
    venv = tmp_path_factory.mktemp("wheel") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "_sandstack_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    "--no-index", str(wheel)], check=True, capture_output=True)
    return venv
