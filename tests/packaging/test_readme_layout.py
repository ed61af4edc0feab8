"""The README's layout table ("path → what lives there") names every component and every test folder."""

from __future__ import annotations

import ast

from testbed.specs import REPO


def layout_row(first_cell_starts: str) -> str:
    rows = [line for line in (REPO / "README.md").read_text().splitlines()
            if line.startswith(f"| {first_cell_starts}")]
    assert len(rows) == 1, f"{len(rows)} layout rows start with {first_cell_starts!r}"
    return rows[0]


def test_the_components_row_names_every_component():
    """Every component class (a pulumi.ComponentResource, directly or through the registering base that others
    extend, which is not one a user meets) is named in the layout row."""
    bases = {node.name: [ast.unparse(b) for b in node.bases] for path in (REPO / "components").glob("*.py")
             for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)}
    found = {"pulumi.ComponentResource"}
    while grown := {name for name, of in bases.items() if name not in found and found & set(of)}:
        found |= grown
    extended = {b for of in bases.values() for b in of}
    components = sorted(found - {"pulumi.ComponentResource"} - extended)
    assert len(components) >= 9, components  # SandboxStack, SandboxHost, the five host roles, template, pool
    row = layout_row("`components/` ")
    assert [c for c in components if f"`{c}`" not in row] == []


def test_the_tests_row_names_every_test_folder():
    folders = sorted(p.name for p in (REPO / "tests").iterdir() if p.is_dir() and any(p.glob("*.py")))
    row = layout_row("`tests/spec`")
    assert [f for f in folders if f"`tests/{f}`" not in row] == []
