"""Every committed stack builds under mocks, and the Pulumi program itself runs (or fails cleanly)."""

from __future__ import annotations

import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pulumi
import pytest

from sandstack.spec import load_stack
from tests.components.helpers import CONTAINER, REPO, STACKS, Built
from testbed.specs import DEV_SECRETS, secret_keys
from testbed.provider.mocks import RecordingMocks, run_program

STACK_FILES = sorted(STACKS.glob("*.yaml"))


def test_the_committed_stacks_are_the_ones_parametrized():
    assert [p.name for p in STACK_FILES] == ["dev.yaml", "prod.yaml"]


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.stem)
def test_every_stack_builds_under_mocks_with_one_container_per_replica(path: Path, tmp_path: Path):
    spec = load_stack(path)
    secrets = {key: f"value-of-{key}" for key in secret_keys(spec.spec.model_dump())}
    built = Built.from_path(path, stack=path.stem, secret_config=secrets, build_root=tmp_path)

    # Host by host (spec order), then that host's pools (spec order), then replicas.
    placed = [(h, pool, i) for h in spec.hosts for pool, p in spec.pools.items() if h in p.hosts
              for i in range(p.replicas)]
    sandbox_containers = [r.name for r in built.mocks.by_type(CONTAINER)
                          if {"label": "sandstack.role", "value": "sandbox"} in r.inputs["labels"]]
    assert sorted(sandbox_containers) == sorted(f"sandstack-{pool}.{h}-{i}" for h, pool, i in placed)
    assert [s["name"] for s in built.sandboxes] == [f"{h}/{pool}/{i}" for h, pool, i in placed]
    # One guard per host, one gateway per host that has a gateway pool.
    assert sorted(r.name for r in built.mocks.by_type(CONTAINER) if r.name.endswith("-guard-container")) == \
        sorted(f"sandstack-{h}-guard-container" for h in spec.hosts)


# --- the Pulumi program (__main__.py) ---------------------------------------------------------------

def _run_main(project_dir: Path, monkeypatch, mocks: RecordingMocks, stack: str = "dev", config=None):
    monkeypatch.chdir(project_dir)
    return run_program(lambda: runpy.run_path(str(REPO / "__main__.py"), run_name="__main__"), mocks,
                       stack=stack, config=config, secret_config=DEV_SECRETS)


@pytest.fixture
def project_dir(tmp_path: Path) -> Path:
    """A copy of the project's stacks, as the program's working directory (its build contexts go there)."""
    shutil.copytree(STACKS, tmp_path / "stacks")
    return tmp_path


def test_main_runs_the_dev_stack_and_exports_sandboxes_and_hosts(project_dir, monkeypatch):
    mocks = RecordingMocks()
    result = _run_main(project_dir, monkeypatch, mocks)

    assert result.outputs["hosts"] == {"local": {"address": "localhost", "guard": "sandstack-dev_guard"}}
    assert [s["name"] for s in result.outputs["sandboxes"]] == [
        "local/shell/0", "local/shell/1", "local/python/0", "local/python/1", "local/preview/0", "local/builder/0"]
    assert result.outputs["sandboxes"][2]["container"] == "sandstack-dev-python-0"
    # Build contexts go under the working directory's .sandstack/build (gitignored), one per snapshot image:
    # `builder` has `preview`'s snapshot content and runs on its image.
    assert sorted(p.name.rsplit("-", 1)[0] for p in (project_dir / ".sandstack" / "build").iterdir()) == \
        ["preview", "python", "shell"]
    stack_urn = "urn:pulumi:dev::sandstack::pulumi:pulumi:Stack$sandstack:index:SandboxStack::sandstack"
    assert mocks.registrations[stack_urn].typ == "sandstack:index:SandboxStack"


def test_main_reads_the_spec_named_by_the_spec_config_key(project_dir, monkeypatch):
    (project_dir / "stacks" / "dev.yaml").rename(project_dir / "elsewhere.yaml")
    shutil.copytree(STACKS / "files", project_dir / "files")  # snapshot files are next to the spec
    result = _run_main(project_dir, monkeypatch, RecordingMocks(), config={"spec": "elsewhere.yaml"})
    assert len(result.outputs["sandboxes"]) == 6


def test_main_fails_on_a_broken_spec_with_the_validate_lines_and_registers_nothing(project_dir, monkeypatch):
    dev = project_dir / "stacks" / "dev.yaml"
    text = dev.read_text()
    assert text.count("egress: allow-list") == 1 and text.count("replicas: 2") == 2
    dev.write_text(text.replace("egress: allow-list", "egress: allow-some").replace("replicas: 2", "replicas: -1", 1))
    validate = subprocess.run([str(Path(sys.executable).parent / "sandstack"), "validate", "stacks/dev.yaml"],
                              cwd=project_dir, capture_output=True, text=True)
    assert validate.returncode == 1
    expected_lines = [
        "stacks/dev.yaml:44:15: $.templates.python.network.egress: 'allow-some' is not allowed; "
        "use one of 'deny-all', 'allow-list', 'allow-all'",
        "stacks/dev.yaml:79:15: $.pools.shell.replicas: -1 is below the minimum 0",
    ]
    assert validate.stdout.splitlines() == expected_lines

    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError) as failure:
        _run_main(project_dir, monkeypatch, mocks)
    assert str(failure.value) == "stacks/dev.yaml is not a valid sandstack spec:\n" + "\n".join(expected_lines)
    assert failure.value.__cause__ is None and failure.value.__suppress_context__  # `from None`: no traceback chain
    assert mocks.registrations == {}
    assert not (project_dir / ".sandstack").exists()
