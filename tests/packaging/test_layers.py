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


# The runtime's parts (docs/design/runtime.md, "The parts"): no module reaches into another's private members, no
# part takes anything typed Any, and each part offers what its Protocol in sandstack.runtime.interfaces says.

RUNTIME = REPO / "sandstack" / "runtime"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_names(tree: ast.AST) -> set[str]:
    """The private names a module defines: its functions, classes and variables, its classes' methods and the
    attributes it assigns (`self._x = ...`)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return {name for name in names if _private(name)}


def private_reaches(sources: dict[str, str]) -> list[str]:
    """Where a module of `sources` (path → text) touches a private member another module of them defines: imports
    it, or reads it off anything (`x._y`, `super()._y`, `self._y` it does not define itself: a mixin's reach into
    the class it is mixed into). A private of a library (the Docker SDK's raw request helpers) is not counted."""
    trees = {path: ast.parse(text, path) for path, text in sources.items()}
    own = {path: private_names(tree) for path, tree in trees.items()}
    anyone = set().union(*own.values()) if own else set()
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sandstack."):
                found += [f"{path}:{node.lineno}: imports {alias.name}" for alias in node.names
                          if _private(alias.name)]
            if isinstance(node, ast.Attribute) and _private(node.attr):
                base = node.value
                mine = isinstance(base, ast.Name) and base.id in ("self", "cls")
                if isinstance(base, ast.Call) and ast.unparse(base.func) == "super":
                    found.append(f"{path}:{node.lineno}: {ast.unparse(node)} is a base class's private member")
                elif mine and node.attr not in own[path]:
                    found.append(f"{path}:{node.lineno}: {ast.unparse(node)} is not defined in this module")
                elif not mine and node.attr in anyone - own[path]:
                    found.append(f"{path}:{node.lineno}: {ast.unparse(node)} is another module's private member")
    return found


def runtime_sources() -> dict[str, str]:
    return {str(path.relative_to(REPO)): path.read_text() for path in sorted(RUNTIME.rglob("*.py"))}


def test_no_runtime_module_touches_another_modules_private_members():
    assert private_reaches(runtime_sources()) == []


def test_a_reach_into_another_modules_private_member_is_found():
    """The check finds each way: an import, an attribute of another object, a mixin's `self`, a base's `super()`."""
    sources = {
        "hub.py": "class Hub:\n    def __init__(self):\n        self._live = {}\n    def _run(self):\n        pass\n",
        "part.py": "from sandstack.hub import _helper\nclass Part:\n    def go(self, hub):\n        hub._run()\n",
        "mixin.py": "class Mixin:\n    def go(self):\n        return self._live\n",
        "child.py": "class Child(Hub):\n    def _run(self):\n        return super()._run()\n",
        "fine.py": "class Fine:\n    def __init__(self):\n        self._mine = 1\n    def go(self, api):\n"
                   "        return self._mine, api._result\n",
    }
    assert private_reaches(sources) == [
        "part.py:1: imports _helper", "part.py:4: hub._run is another module's private member",
        "mixin.py:3: self._live is not defined in this module",
        "child.py:3: super()._run is a base class's private member"]


def test_no_runtime_part_takes_anything_typed_any():
    """A part receives the parts it uses typed (sandstack.runtime.interfaces), never `Any`."""
    found = []
    for path, text in runtime_sources().items():
        for node in ast.walk(ast.parse(text, path)):
            if isinstance(node, ast.FunctionDef) and node.name == "__init__":
                for arg in [*node.args.args, *node.args.kwonlyargs]:
                    if arg.annotation is not None and "Any" in ast.unparse(arg.annotation).replace("|", " ").split():
                        found.append(f"{path}:{node.lineno}: {arg.arg}: {ast.unparse(arg.annotation)}")
    assert found == []


# Each Protocol of sandstack.runtime.interfaces and the class that implements it.
PARTS = {"Leases": "leases.Leases", "Execs": "execs.Execs", "Credentials": "credentials.Credentials",
         "Sandboxes": "sandboxes.Sandboxes", "Readiness": "readiness.Readiness", "Places": "ondemand.OnDemandPlaces",
         "Copies": "storage.Copies", "Storage": "storage.Storage", "Transfers": "transfer.Transfers",
         "Hibernation": "hibernate.Hibernation", "Access": "access.Access", "Processes": "processes.Processes",
         "RootSnapshots": "rootsnap.RootSnapshots", "Snapshots": "snapshots.Snapshots",
         "WarmClaims": "claims.WarmClaims", "SessionTokens": "session_tokens.SessionTokens"}


def test_each_part_offers_what_its_protocol_says():
    """Every method of a part's Protocol exists on its class with the same parameters (names, kinds, defaults), and
    every attribute the Protocol shares is set by the class's constructor."""
    import importlib
    import inspect
    from typing import Protocol

    from sandstack.runtime import interfaces

    protocols = {name: value for name, value in vars(interfaces).items()
                 if inspect.isclass(value) and Protocol in getattr(value, "__mro__", ()) and value is not Protocol
                 and value.__module__ == interfaces.__name__}
    assert sorted(protocols) == sorted(PARTS)
    problems = []
    for name, protocol in protocols.items():
        module, cls_name = PARTS[name].rsplit(".", 1)
        cls = getattr(importlib.import_module(f"sandstack.runtime.{module}"), cls_name)
        init = ast.unparse(ast.parse(inspect.getsource(cls)))
        for member in protocol.__annotations__:
            if f"self.{member}" not in init and f"self.{member}," not in init:
                problems.append(f"{name}.{member}: not set by {PARTS[name]}")
        for member, wanted in vars(protocol).items():
            if member.startswith("_") or not (inspect.isfunction(wanted) or isinstance(wanted, property)):
                continue
            given = getattr(cls, member, None)
            if isinstance(wanted, property):
                if not isinstance(given, property):
                    problems.append(f"{name}.{member}: not a property of {PARTS[name]}")
                continue
            if given is None:
                problems.append(f"{name}.{member}: missing from {PARTS[name]}")
                continue
            shape = [(p.name, p.kind, p.default) for p in inspect.signature(wanted).parameters.values()]
            found = [(p.name, p.kind, p.default) for p in inspect.signature(given).parameters.values()]
            if shape != found:
                problems.append(f"{name}.{member}: {found} is not the Protocol's {shape}")
    assert problems == []
