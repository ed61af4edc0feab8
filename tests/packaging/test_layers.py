"""The layers point one way, and the test suites keep their own rooms (checked on the import statements).

spec → plan → components → tooling/program, and plan → review (previews and diffs: no Pulumi, no components);
the plan imports neither Pulumi nor the components (it reads the
components' package data through importlib.resources only). Component tests do not use the engine harness;
the provider model (testbed/provider), the spec builders (testbed/specs.py) and the harness (testbed/harness)
do not import each other except harness → provider; testbed (shared by tests and benchmarks) and the
benchmarks import nothing from tests.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from testbed.specs import REPO


def imports_of(folder: Path) -> dict[str, set[str]]:
    """Every module each .py file under `folder` imports (absolute names; relative imports are refused)."""
    out: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py") if folder.is_dir() else [folder]):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path}: relative import"
                names |= {node.module or ""} | {f"{node.module}.{alias.name}" for alias in node.names}
        out[str(path.relative_to(REPO))] = names
    return out


def offenders(folder: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    found = {}
    for path, names in imports_of(REPO / folder).items():
        bad = sorted(n for n in names if any(n == f or n.startswith(f + ".") for f in forbidden))
        if bad:
            found[path] = bad
    return found


@pytest.mark.parametrize(("folder", "forbidden"), [
    ("sandstack/spec", ("sandstack.plan", "sandstack.components", "sandstack.tooling", "sandstack.program",
                        "pulumi", "pulumi_docker")),
    ("sandstack/plan", ("sandstack.components", "sandstack.tooling", "sandstack.program", "pulumi", "pulumi_docker")),
    ("sandstack/review", ("sandstack.components", "sandstack.tooling", "sandstack.program", "pulumi",
                          "pulumi_docker")),
    ("sandstack/policy", ("sandstack.components", "sandstack.tooling", "sandstack.program", "sandstack.review",
                          "pulumi", "pulumi_docker", "pulumi_policy")),
    ("components", ("sandstack.tooling", "sandstack.review", "sandstack.policy")),
    ("tests/components", ("testbed.harness", "testbed.deploy", "tests.engine", "tests.changes")),
    # The plan's own tests need no Pulumi: plain values in, plain values out.
    ("tests/plan", ("pulumi", "pulumi_docker", "sandstack.components", "sandstack.program", "testbed.provider",
                    "testbed.harness", "testbed.deploy", "tests.engine")),
    ("testbed/specs.py", ("testbed.harness", "testbed.provider", "testbed.deploy", "tests")),
    ("testbed/provider", ("testbed.harness", "testbed.specs", "testbed.deploy", "tests")),
    ("testbed/harness", ("testbed.specs", "testbed.deploy", "tests")),
    ("testbed", ("tests",)),
    ("benchmarks", ("tests",)),
])
def test_a_layer_imports_nothing_above_it(folder: str, forbidden: tuple[str, ...]):
    assert offenders(folder, forbidden) == {}
