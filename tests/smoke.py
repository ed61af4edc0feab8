"""The smoke tier (`pytest -m smoke`, about a minute on 2 cores, no Docker): a few fast tests of every package of
sandstack and of every folder of the suite, so that one command between two edits says whether anything is broken at
all. tests/conftest.py marks the tests listed here `smoke`; tests/packaging/test_tiers.py fails when a listed test is
gone or a package or suite folder has none. The whole no-Docker suite and CI still run everything.

Each entry is a node id or a prefix of node ids (a whole file, or a test with all its parameters).
"""

from __future__ import annotations

# The sandstack package (or suite folder) each entry stands for → its tests.
SMOKE: dict[str, tuple[str, ...]] = {
    "sandstack.spec": ("tests/spec/test_generated.py", "tests/spec/test_schema_errors.py",
                       "tests/spec/test_stacks.py"),
    "sandstack.plan": ("tests/plan/test_imports.py", "tests/plan/test_sandbox_plan.py"),
    "sandstack.components": ("tests/components/test_stacks.py",),
    "sandstack.program": ("tests/components/test_stacks.py::test_main_runs_the_dev_stack_and_exports_sandboxes_and_hosts",),
    "sandstack.review": ("tests/review/test_diff.py",),
    "sandstack.policy": ("tests/policy/test_check.py", "tests/policy/test_crossguard.py"),
    "sandstack.tooling": ("tests/spec/test_output.py",),
    "sandstack.runtime": ("tests/runtime/test_api.py",),
    "sandstack.client": ("tests/runtime/test_client.py",),
    "sandstack.package": ("tests/package/test_schema.py",),
    "tests/differential": ("tests/differential/test_registrations.py::test_a_committed_stack_registers_exactly_its_plan",),
    "tests/changes": ("tests/changes/test_change_matrix.py::test_every_model_field_has_a_case",
                      "tests/changes/test_replacement.py::test_changing_only_memory_updates_the_sandboxes_in_place"),
    "tests/assets": ("tests/assets/test_guard_script.py",),
    "tests/benchmarks": ("tests/benchmarks/test_measure.py",),
    "tests/packaging": ("tests/packaging/test_layers.py", "tests/packaging/test_tiers.py"),
    "tests/engine": ("tests/engine/harness/test_recording.py",),
}


def is_smoke(nodeid: str) -> bool:
    return any(nodeid == entry or nodeid.startswith(entry + "::") or nodeid.startswith(entry + "[")
               for entries in SMOKE.values() for entry in entries)
