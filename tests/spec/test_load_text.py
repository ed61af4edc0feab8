"""A spec given as YAML text that is not a file (`sandstack.spec.load_text`: a Pulumi program's `specYaml` input):
the layers of a file, diagnostics naming the given name with line and column, relative paths read from the given
folder, and the file size cap."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandstack.spec import SpecError, check_text, load_stack, load_text
from sandstack.spec.loader import MAX_FILE_BYTES
from testbed.specs import STACKS


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_a_committed_stack_as_text_resolves_as_its_file_does(name: str):
    path = STACKS / f"{name}.yaml"
    from_file, from_text = load_stack(path), load_text(path.read_text(), STACKS, "specYaml")
    assert (from_text.spec, from_text.templates, from_text.hosts, from_text.pools) == (
        from_file.spec, from_file.templates, from_file.hosts, from_file.pools)


def test_diagnostics_name_the_text_with_line_and_column():
    text = (STACKS / "dev.yaml").read_text().replace("replicas: 2", "replicas: -2", 1)
    line = text.splitlines().index(next(s for s in text.splitlines() if "replicas: -2" in s)) + 1
    column = text.splitlines()[line - 1].index("-2") + 1
    assert [d.text() for d in check_text(text, STACKS, "specYaml").diagnostics][0].startswith(
        f"specYaml:{line}:{column}: $.pools.")


def test_relative_paths_are_read_from_the_given_folder(tmp_path: Path):
    text = (STACKS / "dev.yaml").read_text()
    with pytest.raises(SpecError) as refused:
        load_text(text, tmp_path, "specYaml")  # the snapshot's files/agent_api.py is not in tmp_path
    assert str(refused.value).endswith(
        f"$.templates.python.snapshot.files[0].source: 'files/agent_api.py' is not a file (looked in "
        f"'{tmp_path.resolve()}')")
    assert str(refused.value).startswith("specYaml:")


def test_text_larger_than_a_spec_file_may_be_is_refused_before_it_is_parsed():
    text = "version: 1\n" + "#" * MAX_FILE_BYTES
    assert [d.text() for d in check_text(text, ".", "specYaml").diagnostics] == [
        f"specYaml:1:1: $: is larger than the {MAX_FILE_BYTES // 1024} KiB limit for a spec file"]
