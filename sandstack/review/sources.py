"""Where a reviewed spec comes from: a file, or `git:REF:PATH` read from git without touching the work tree.

A spec refers to files next to it (snapshot files, data mounts) and has its address lock beside it, so a git input
is the spec file, the paths it names and its lock, extracted with `git archive` into a temporary directory. Only
those paths are read from git, streamed to disk: the spec's whole folder (the whole repository, for a stack at its
root) was once held in memory.
"""

from __future__ import annotations

import functools
import posixpath
import subprocess
import tarfile
import tempfile
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Iterator

from sandstack.files import UnreadableFile, check_regular, size_text
from sandstack.spec.addresses import lock_path
from sandstack.spec.errors import SpecError
from sandstack.spec.loader import MAX_FILE_BYTES, load
from sandstack.spec.models import Stack
from sandstack.spec.models.templates import RELATIVE_PATH_PATTERN
from sandstack.spec.walk import model_fields


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
        try:  # a pipe or a device would be waited on forever: refused as every command's reader refuses them
            check_regular(path, source, "a stack file")
        except UnreadableFile as error:
            raise SourceError(str(error)) from None
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
    # Bounded before it is extracted, as a stack file on disk is before it is read (sandstack.files).
    size = int(_git("cat-file", "-s", f"{ref}:{inside}", cwd=root).decode().strip() or 0)
    if size > MAX_FILE_BYTES:
        raise SourceError(f"{source}: is larger than the {size_text(MAX_FILE_BYTES)} limit for a stack file")
    with tempfile.TemporaryDirectory(prefix="sandstack-git-") as tmp:
        _extract(root, ref, [str(inside)], Path(tmp))
        # The address lock beside it at that revision too: each side of a diff keeps the addresses it held.
        needed = _existing(root, ref, [*_named_paths(Path(tmp) / inside, inside.parent),
                                       str(lock_path(PurePosixPath(inside)))])
        if needed:
            _extract(root, ref, needed, Path(tmp))
        yield Path(tmp) / inside


@functools.cache
def _file_fields() -> tuple[tuple[str, ...], ...]:
    """The model fields that name a file or folder next to the stack file (their type is the relative path),
    as path parts: ('templates', '*', 'data[]', 'source'), ..."""
    return tuple(tuple(path.split(".")) for path, info in model_fields(Stack).items()
                 if any(getattr(m, "pattern", None) == RELATIVE_PATH_PATTERN for m in info.metadata))


def _values_at(node: object, parts: tuple[str, ...]) -> Iterator[object]:
    if not parts:
        yield node
        return
    name, items = parts[0].removesuffix("[]"), parts[0].endswith("[]")
    if not isinstance(node, dict):
        return
    for child in (node.values() if name == "*" else [node.get(name)]):
        for item in (child if isinstance(child, list) else []) if items else [child]:
            yield from _values_at(item, parts[1:])


def _named_paths(spec: Path, folder: PurePosixPath) -> list[str]:
    """The repository paths of the files and folders the spec names next to it, as far as it can be read (an
    unreadable or invalid spec names none: loading it reports why)."""
    try:
        data = load(spec).data
    except SpecError:
        return []
    out = set()
    for parts in _file_fields():
        for value in _values_at(data, parts):
            if isinstance(value, str) and value and not value.startswith("/"):
                path = posixpath.normpath(posixpath.join(folder.as_posix(), value))
                # Outside the spec's folder is an error the spec's rules report; nothing of it is read.
                if _within(path, folder.as_posix()):
                    out.add(path)
    return sorted(out)


def _within(path: str, folder: str) -> bool:
    """Whether a normalised repository path is `folder` or under it ('.' is the repository's root)."""
    if folder == ".":
        return path != ".." and not path.startswith("../")
    return path == folder or path.startswith(f"{folder}/")


def _existing(root: Path, ref: str, paths: list[str]) -> list[str]:
    """Those of `paths` that exist at `ref` (a missing one is reported by the spec's rules, as for a file)."""
    if not paths:
        return []
    listed = _git("--literal-pathspecs", "ls-tree", "--full-tree", "--name-only", "-z", ref, "--", *paths, cwd=root)
    return sorted(name for name in listed.decode("utf-8", "surrogateescape").split("\0") if name)


def _extract(root: Path, ref: str, paths: list[str], into: Path) -> None:
    """`git archive REF -- PATHS` streamed into `into`: the archive is never held in memory whole."""
    command = ["git", "--literal-pathspecs", "archive", "--format=tar", ref, "--", *paths]
    with tempfile.TemporaryFile() as errors:
        try:
            process = subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, stderr=errors)
        except FileNotFoundError:
            raise SourceError("git is not installed, so a git: input cannot be read") from None
        with process:
            try:
                with tarfile.open(fileobj=process.stdout, mode="r|") as tar:
                    tar.extractall(into, filter="data")
            except tarfile.ReadError:
                pass  # git wrote no archive: its exit status and message below say why
            except tarfile.FilterError as error:  # a link out of the folder, which a checkout would follow
                raise SourceError(f"{error} at {ref}: a git input is read without following it") from None
            # tarfile stops at the archive's end marker; the padding after it must still be read, or git dies of
            # a closed pipe and its exit status says it failed.
            while process.stdout.read(1 << 16):
                pass
        if process.returncode != 0:
            errors.seek(0)
            lines = errors.read().decode(errors="replace").strip().splitlines()
            raise SourceError(lines[-1] if lines else f"git archive {ref} failed")
