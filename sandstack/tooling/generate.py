"""Generated files: the JSON Schema, the README's spec reference and its review example, the policy index and the
Pulumi package's schema, written or checked for staleness."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sandstack.files import MIB, read_text
from sandstack.spec.schema import SCHEMA_FILE, render_schema
from sandstack.tooling import examples, policy_index
from sandstack.tooling.reference import render_reference, splice

REGENERATE = "sandstack generate"
GENERATED_LIMIT = 16 * MIB  # the README is ~120 KiB


@dataclass(frozen=True)
class Generated:
    path: str
    render: Callable[[Path, str], str]  # (repository root, current text of the file) → what it should be


GENERATED = (
    Generated(SCHEMA_FILE, lambda _root, _current: render_schema()),
    Generated("README.md", lambda root, current: examples.splice(splice(current, render_reference()),
                                                                 examples.render_examples(root))),
    Generated(policy_index.PATH, lambda _root, _current: policy_index.render_index()),
    Generated("package/schema.json", lambda _root, _current: _package_schema()),
)


def _package_schema() -> str:
    # Lazily: the package's schema is Pulumi's inference over the components (imports Pulumi and pulumi-docker).
    from sandstack.package.provider import render_schema

    return render_schema()


def _current(target: Path) -> str:
    """A generated file's committed text ('' when there is none), read as every command reads a file
    (sandstack.files)."""
    return read_text(target, GENERATED_LIMIT, "a generated file") if target.exists() else ""


def stale(root: Path) -> list[str]:
    """Paths whose committed text differs from what the models generate."""
    out = []
    for item in GENERATED:
        target = root / item.path
        current = _current(target)
        try:
            wanted = item.render(root, current)
        except ValueError:
            out.append(item.path)
            continue
        if current != wanted:
            out.append(item.path)
    return out


def write(root: Path) -> list[str]:
    """Regenerate every generated file; returns the paths that changed."""
    changed = []
    for item in GENERATED:
        target = root / item.path
        current = _current(target)
        wanted = item.render(root, current)
        if current != wanted:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(wanted, encoding="utf-8")
            changed.append(item.path)
    return changed
