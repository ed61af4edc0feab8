"""The plan layer's modules import one another without a circle (a circle hidden behind TYPE_CHECKING counts)."""

from __future__ import annotations

import ast
from pathlib import Path

PLAN = Path(__file__).resolve().parents[2] / "sandstack" / "plan"


def _imports() -> dict[str, set[str]]:
    out = {}
    for path in PLAN.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sandstack.plan"):
                found.add(node.module.removeprefix("sandstack.plan").lstrip(".") or "__init__")
                if node.module == "sandstack.plan":
                    found |= {alias.name for alias in node.names}
        out[path.stem] = {m for m in found if m != path.stem}
    return out


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(module: str, trail: list[str]) -> list[str] | None:
        if state.get(module) == 1:
            return trail[trail.index(module):] + [module]
        if state.get(module) == 2 or module not in graph:
            return None
        state[module] = 1
        for target in sorted(graph[module]):
            found = visit(target, trail + [module])
            if found:
                return found
        state[module] = 2
        return None

    for module in sorted(graph):
        found = visit(module, [])
        if found:
            return found
    return None


def test_the_plan_modules_import_without_a_circle():
    assert _circle(_imports()) is None


def test_the_circle_finder_finds_one():
    assert _circle({"host": {"runtime_host"}, "runtime_host": {"host"}}) == ["host", "runtime_host", "host"]
