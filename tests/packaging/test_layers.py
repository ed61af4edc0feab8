"""The layers point one way, and the test suites keep their own rooms (checked on the import statements).

spec → plan → components → tooling/program/package (the Pulumi package's provider), and plan → review (previews
and diffs: no Pulumi, no components); the plan imports neither Pulumi nor the components (it reads the
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
    ("components", ("sandstack.tooling", "sandstack.review", "sandstack.policy", "sandstack.package")),
    ("sandstack/package", ("sandstack.tooling", "sandstack.review", "sandstack.policy")),
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


def module_files() -> dict[str, Path]:
    """Every module of the installed package by its dotted name (components/ installs as sandstack.components)."""
    out = {}
    for root, package in ((REPO / "sandstack", "sandstack"), (REPO / "components", "sandstack.components")):
        for path in root.rglob("*.py"):
            parts = [p for p in path.relative_to(root).with_suffix("").parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """module → the package's modules it imports anywhere in its file (a function's or a TYPE_CHECKING import is
    an import too: deferring one hides a circle, it does not remove it). `from a import b` names module a.b
    where there is one, else a."""
    files = module_files()
    graph = {}
    for name, path in files.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                targets |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module
                            for a in node.names}
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_the_package_has_no_import_circles():
    assert circles(import_graph()) == []


def test_a_circle_is_found():
    """The check finds a circle of three modules and leaves out the modules that only lead into it."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]
    files = module_files()
    assert "sandstack.spec.rules.context" in files and "sandstack.components.sandbox_host" in files


VALIDATE = """
import sys
from sandstack.tooling.cli import main
code = main(["validate", sys.argv[1]])
print(code, " ".join(sorted(m for m in sys.modules if m.startswith("sandstack."))))
"""


def test_validate_imports_the_spec_layer_and_nothing_it_does_not_run(tmp_path):
    """`sandstack validate`'s time is mostly its imports (the benchmarks' validate section): it loads neither the
    plan, the review, the policies nor the generators."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", VALIDATE, str(REPO / "stacks" / "dev.yaml")], capture_output=True,
                         text=True, cwd=tmp_path, env={"PYDANTIC_DISABLE_PLUGINS": "__all__", "PATH": "/usr/bin"})
    code, modules = run.stdout.split(" ", 1)
    assert code == "0", run.stderr
    loaded = set(modules.split())
    assert {"sandstack.spec.models", "sandstack.spec.rules", "sandstack.tooling.validate"} <= loaded
    tooling = {"sandstack.tooling", "sandstack.tooling.cli", "sandstack.tooling.sandbox_cli", "sandstack.tooling.validate",
               "sandstack.tooling.helptext", "sandstack.schemas",  # helptext: the parsers' help (argparse, textwrap)
               "sandstack.files"}  # the one reader of a named file (the standard library only)
    assert sorted(m for m in loaded if not m.startswith("sandstack.spec") and m not in tooling) == []
