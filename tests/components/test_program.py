"""`sandstack.program` from a spec object: what it registers and exports is what the same spec's file gives, and
an invalid object fails the program with located messages, without a traceback."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pytest

from sandstack.program import load, program
from sandstack.spec import Stack
from testbed.provider.mocks import RecordingMocks, run_program
from testbed.specs import STACK, changed, spec, write_spec


def skills_spec() -> dict:
    """A spec with a data mount: its relative `source` is read from the object's `source_dir`."""
    return changed(spec({"t": {"base_image": "busybox:1.36"}}), "templates.t.data",
                   [{"source": "skills", "path": "/opt/skills"}])


def built(source, source_dir: Path, build_root: Path) -> tuple[dict, dict]:
    mocks = RecordingMocks()
    result = run_program(lambda: program(source, stack=STACK, source_dir=source_dir, build_root=build_root), mocks,
                         stack=STACK)
    return {urn: reg.inputs for urn, reg in mocks.registrations.items()}, result.outputs


@pytest.mark.parametrize("kind", ["mapping", "model"])
def test_a_spec_object_registers_and_exports_what_its_file_does(tmp_path: Path, kind: str):
    data = skills_spec()
    path = write_spec(tmp_path / "spec", data, files={"skills/SKILL.md": "# skill\n"})
    source = data if kind == "mapping" else Stack.model_validate(data)
    from_file = built(path, path.parent, tmp_path / "build")
    from_object = built(source, path.parent, tmp_path / "build")
    assert from_object == from_file
    assert set(from_object[1]) == {"sandboxes", "hosts"}


def test_an_invalid_spec_object_fails_the_program_with_located_messages(tmp_path: Path):
    with pytest.raises(pulumi.RunError) as raised:
        load(skills_spec(), tmp_path)  # no `skills` folder in the object's source_dir
    assert str(raised.value) == (
        "<object> is not a valid sandstack spec:\n"
        f"<object>: $.templates.t.data[0].source: 'skills' is neither a file nor a folder (looked in "
        f"'{tmp_path.resolve()}')")
