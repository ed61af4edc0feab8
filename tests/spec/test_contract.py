"""Numbers other layers implement (host guard, gateway, sandbox container) come from one spec constant each,
and the generated reference quotes exactly those numbers; the contract's paths, cgroup names, exit statuses and
label keys are typed out only in sandstack/spec/contract.py."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from sandstack.spec import contract, models
from sandstack.spec.contract import CRASH_RETRIES, EXIT_IDLE, EXIT_LIFETIME, IDLE_CPU_MS_PER_S
from sandstack.spec.models import Lifecycle
from sandstack.spec.models.base import change_of
from testbed.specs import REPO


def test_lifecycle_contract_numbers() -> None:
    assert (EXIT_LIFETIME, EXIT_IDLE, CRASH_RETRIES, IDLE_CPU_MS_PER_S) == (124, 123, 3, 20)


def test_lifecycle_descriptions_quote_the_contract() -> None:
    fields = Lifecycle.model_fields
    assert "host guard" in (Lifecycle.__doc__ or "") and "supervisor" not in (Lifecycle.__doc__ or "")
    assert "counted from its first start" in fields["max_lifetime"].description
    assert f"less than {IDLE_CPU_MS_PER_S} ms of CPU per second (readiness probes excluded)" in (
        fields["idle_timeout"].description)
    on_expiry = fields["on_expiry"].description
    assert f"exit status {EXIT_LIFETIME} (max lifetime reached) or {EXIT_IDLE} (idle timeout reached)" in on_expiry
    assert f"at most {CRASH_RETRIES} times (Docker's on-failure:{CRASH_RETRIES})" in on_expiry


@pytest.mark.parametrize(("model", "name", "change"), [
    ("NetworkPolicy", "allow_metadata", "reload gateway + reload guard; a direct route: reload guard"),  # squid.conf and guard rules
    ("Filesystem", "shm_size", "replace"),
    ("WritablePath", "exec", "replace; a disk workspace: replace + new workspaces + reload guard"),
    ("Limits", "open_files", "replace"),  # ulimits are not updated in place by the provider
])
def test_hardening_fields_declare_their_change_effect(model: str, name: str, change: str) -> None:
    info = getattr(models, model).model_fields[name]
    assert change_of(info).label == change


# The contract's literals as Python code would type them out: its paths, a cgroup parent, the supervisor's
# arguments, the label keys (`sandstack.role`, …), and the exit statuses as numbers.
CONTRACT_TEXT = re.compile(
    r"/run/secrets|/run/sandstack|/sys/fs/cgroup|/host-cgroup|/var/lib/sandstack/workspaces|^/sandstack/"
    r"|exit-(?:lifetime|idle)=\d"
    r"|\bsandstack\.(?:stack|managed-by|role|host|pool|template|version|digest|replica|subnet)\b")
CONTRACT_NUMBERS = {contract.EXIT_LIFETIME, contract.EXIT_IDLE}
CONTRACT_MODULE = "sandstack/spec/contract.py"
# Files other work owns that still type a label key out; remove an entry once its file imports LABEL_ROLE.
# The runtime's container ships only sandstack.runtime and two plan modules (sandstack.plan.runtime_host
# `code_files`), so it cannot import the contract; tests/runtime/test_secret_files.py keeps its copy equal.
PENDING: set[tuple[str, str]] = {("sandstack/runtime/secret_files.py", "/run/secrets/session")}


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def contract_literals(path: Path) -> list[tuple[int, object]]:
    """Every string (docstrings apart) or number in `path`'s code that repeats the contract."""
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in docs:
            continue
        if isinstance(node.value, str) and CONTRACT_TEXT.search(node.value):
            found.append((node.lineno, node.value))
        elif type(node.value) is int and node.value in CONTRACT_NUMBERS:
            found.append((node.lineno, node.value))
    return sorted(found, key=lambda item: item[0])


def test_the_contract_is_typed_out_only_in_its_module() -> None:
    """The spec's rules, the plan and the components import the contract; the shell assets get it as arguments
    or environment from the plan (not scanned: they hold none of it either, see tests/assets)."""
    offenders = []
    for folder in ("sandstack", "components"):
        for path in sorted((REPO / folder).rglob("*.py")):
            name = path.relative_to(REPO).as_posix()
            if name == CONTRACT_MODULE:
                continue
            offenders += [f"{name}:{line}: {value!r}" for line, value in contract_literals(path)
                          if (name, value) not in PENDING]
    assert offenders == [], f"import these from {CONTRACT_MODULE} instead of typing them out"


def test_the_contract_scan_finds_what_it_looks_for(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('"""A docstring may say /run/secrets."""\n'
                      'A = {"sandstack.role": "x"}\nB = f"{A}/run/sandstack/guard"\nC = 124\nD = "sandstack.plan"\n')
    assert contract_literals(sample) == [(2, "sandstack.role"), (3, "/run/sandstack/guard"), (4, 124)]


def test_the_plan_re_exports_the_one_contract() -> None:
    from sandstack.plan import contract as plan_contract

    assert {name: getattr(plan_contract, name) for name in plan_contract.__all__} == {
        name: getattr(contract, name) for name in plan_contract.__all__}
    assert contract.STATE_MOUNT.startswith(contract.RUN_DIR + "/")
    assert contract.cgroup_parent("sandstack-t-a-0") == f"/{contract.CGROUP_ROOT_NAME}/sandstack-t-a-0"
