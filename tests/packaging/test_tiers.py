"""The smoke tier stays what the README says it is: every package of sandstack and every folder of the suite has
tests in it (tests/smoke.py), and every entry there still names collected tests."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from tests.smoke import SMOKE, is_smoke

ROOT = Path(__file__).resolve().parents[2]


def _packages() -> set[str]:
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    # Data-only packages and sub-packages are tested through their parent.
    tops = {p for p in listed if p.count(".") == 1 and p != "sandstack.schemas"}
    return tops | {"sandstack.program"}


def test_every_package_and_every_suite_folder_has_smoke_tests():
    folders = {f"tests/{p.name}" for p in (ROOT / "tests").iterdir()
               if p.is_dir() and (p / "__init__.py").exists()}
    covered_folders = {entry.split("/")[1] for entries in SMOKE.values() for entry in entries}
    assert sorted(_packages() - set(SMOKE)) == []
    assert sorted(f for f in folders if f.split("/")[1] not in covered_folders) == []


def test_every_smoke_entry_names_collected_tests():
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "-m", "smoke", "-n", "0"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    ids = [line for line in out.stdout.splitlines() if "::" in line]
    assert ids and all(is_smoke(i) for i in ids)
    dead = [entry for entries in SMOKE.values() for entry in entries
            if not any(i == entry or i.startswith(entry + "::") or i.startswith(entry + "[") for i in ids)]
    assert dead == [], "entries of tests/smoke.py that name no collected test"


def test_an_entry_matches_its_tests_and_nothing_beside_them():
    assert is_smoke("tests/runtime/test_api.py::test_a_wrong_or_missing_token_is_401_with_nothing_else")
    assert not is_smoke("tests/runtime/test_api_more.py::test_x")  # a prefix of a file name is not the file
    assert is_smoke("tests/changes/test_change_matrix.py::test_every_model_field_has_a_case")
    assert not is_smoke("tests/changes/test_change_matrix.py::test_a_field_change_does_what_its_declaration_says[x]")
