"""Where a reviewed spec comes from: a file, or `git:REF:PATH` read from git without touching the work tree.

A spec refers to files next to it (snapshot files), so a git input is the spec's whole folder at REF,
extracted with `git archive` into a temporary directory.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import tempfile
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Iterator

from sandstack.spec.loader import not_a_file


class SourceError(Exception):
    """An input that cannot be read: a missing file, ref or path (a usage error, exit 2)."""


def _git(*args: str, cwd: Path) -> bytes:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)
    except FileNotFoundError:
        raise SourceError("git is not installed, so a git: input cannot be read") from None
    if done.returncode != 0:
        raise SourceError(done.stderr.decode(errors="replace").strip().splitlines()[-1] if done.stderr else
                          f"git {' '.join(args)} failed")
    return done.stdout


@contextmanager
def opened(source: str, cwd: Path | None = None) -> Iterator[Path]:
    """The path of the spec `source` names, for as long as the context lasts."""
    cwd = cwd or Path.cwd()
    if not source.startswith("git:"):
        path = Path(source)
        if path.is_dir():
            raise SourceError(f"{source}: is a directory; give a stack file, e.g. {Path(source) / 'prod.yaml'}")
        if not path.exists():
            raise SourceError(f"{source}: no such file")
        kind = not_a_file(path.stat().st_mode)
        if kind:  # a pipe or a device would be waited on forever
            raise SourceError(f"{source}: is {kind}, not a regular file: give the path of a stack file")
        yield path
        return
    ref, sep, path = source[4:].partition(":")
    if not sep or not ref or not path:
        raise SourceError(f"{source}: write git inputs as git:REF:PATH, e.g. git:main:stacks/prod.yaml")
    root = Path(_git("rev-parse", "--show-toplevel", cwd=cwd).decode().strip())
    prefix = Path(_git("rev-parse", "--show-prefix", cwd=cwd).decode().strip() or ".")
    inside = PurePosixPath((prefix / path).as_posix())
    try:
        _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", cwd=root)
    except SourceError:
        raise SourceError(f"{source}: no commit {ref!r} in {root}") from None
    try:
        kind = _git("cat-file", "-t", f"{ref}:{inside}", cwd=root).decode().strip()
    except SourceError:
        raise SourceError(f"{source}: {inside} does not exist at {ref}") from None
    if kind == "tree":
        raise SourceError(f"{source}: {inside} is a directory at {ref}; give a stack file in it, "
                          f"e.g. git:{ref}:{PurePosixPath(path) / 'prod.yaml'}")
    if kind != "blob":
        raise SourceError(f"{source}: {inside} is a {kind} at {ref}, not a file")
    archive = _git("archive", "--format=tar", ref, "--", str(inside.parent), cwd=root)
    with tempfile.TemporaryDirectory(prefix="sandstack-git-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        yield Path(tmp) / inside
