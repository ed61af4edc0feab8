"""A `git:REF:PATH` input reads the spec and the paths it names, nothing else of the repository.

Before, the spec's whole folder was archived into memory: for a stack at the repository's root, the whole
repository (628 MB for a 300 MB repository). The tests put a large unrelated file beside the stack and assert the
cause: which paths come out of git, and how much memory reading them takes (tracemalloc counts the bytes Python
holds, which is where the archive was kept), never how long it took.
"""

from __future__ import annotations

import copy
import os
import subprocess
import tracemalloc
from pathlib import Path

import pytest

from sandstack.review.sources import SourceError, opened
from sandstack.spec import load_stack
from sandstack.tooling.cli import main
from testbed.specs import write_spec
from tests.review.cases import BASE, FILES

BIG = 50 * 1024**2
SKILLS = {"skills/search.md": "# search\n", "skills/deep/read.md": "# read\n"}


def _git(repo: Path, *args: str) -> None:
    # Uncompressed objects: zlib over 50 MB of random bytes would take seconds and save nothing.
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "core.compression=0", *args],
                   cwd=repo, check=True, capture_output=True)


def _with_data(data: dict, source: str = "skills") -> dict:
    out = copy.deepcopy(data)
    out["templates"]["agent"]["data"] = [{"source": source, "path": "/opt/skills"}]
    return out


def _repository(tmp_path: Path, folder: str, spec: dict, big: int = 0) -> Path:
    """A repository whose HEAD holds `spec` in `folder` with its snapshot file and data folder, and `big` bytes
    of random data (incompressible, like a dataset or a model) beside it."""
    repo = tmp_path / "repo"
    write_spec(repo / folder, spec, {**FILES, **SKILLS})
    (repo / folder / "weights.bin").write_bytes(os.urandom(big))
    (repo / folder / "unrelated").mkdir()
    (repo / folder / "unrelated" / "notes.txt").write_text("not named by the spec\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "stack and a large unrelated file")
    return repo


def _read(repo: Path, source: str) -> tuple[list[str], int]:
    """The files the git input extracted, and the most memory Python held while it read them."""
    tracemalloc.start()
    try:
        with opened(source, cwd=repo) as spec:
            _, peak = tracemalloc.get_traced_memory()
            root = spec.parents[len(Path(source.split(":", 2)[2]).parts) - 1]
            files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
            load_stack(spec)  # the stack still loads: everything it needs was read
    finally:
        tracemalloc.stop()
    return files, peak


@pytest.mark.parametrize("folder", [".", "stacks"], ids=["at-the-root", "in-a-folder"])
def test_a_git_input_reads_only_the_spec_and_the_paths_it_names(tmp_path, folder):
    repo = _repository(tmp_path, folder, _with_data(BASE), BIG)
    inside = "" if folder == "." else f"{folder}/"
    files, peak = _read(repo, f"git:main:{inside}stack.yaml")
    assert files == sorted(f"{inside}{name}" for name in ["stack.yaml", "files/tool.sh", *SKILLS])
    assert peak < 8 * 1024**2, f"reading the git input held {peak / 1024**2:.1f} MiB in memory"


def test_the_data_and_snapshot_paths_of_defaults_and_every_template_are_read(tmp_path):
    spec = _with_data(BASE, "skills/search.md")
    spec["templates"]["shell"]["data"] = [{"source": "skills/deep", "path": "/opt/deep"}]
    repo = _repository(tmp_path, ".", spec)
    files, _ = _read(repo, "git:main:stack.yaml")
    assert files == ["files/tool.sh", "skills/deep/read.md", "skills/search.md", "stack.yaml"]


def test_a_named_path_missing_at_the_ref_is_the_spec_rules_error_not_a_git_error(tmp_path, monkeypatch, capsys):
    repo = _repository(tmp_path, ".", _with_data(BASE, "skills-renamed"))
    monkeypatch.chdir(repo)
    assert main(["preview", "git:main:stack.yaml"]) == 1
    err = capsys.readouterr().err
    assert "$.templates.agent.data[0].source: 'skills-renamed' is neither a file nor a folder" in err


def test_a_link_out_of_the_stack_folder_is_refused_not_followed(tmp_path):
    repo = tmp_path / "repo"
    write_spec(repo, _with_data(BASE), FILES)
    (repo / "skills").symlink_to("/etc")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "a link out")
    with pytest.raises(SourceError) as caught, opened("git:main:stack.yaml", cwd=repo):
        pass
    assert str(caught.value) == "'skills' is a link to an absolute path at main: a git input is read without following it"

