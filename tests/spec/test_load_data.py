"""A spec given as an object (`sandstack.spec.load_data`): the same schema, rules and resolution as a file,
errors located by JSON path (`<object>: $.pools.t.replicas: …`), and what a file could not hold refused."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sandstack.spec import SpecError, Stack, check_data, load_data, load_stack
from sandstack.spec.loader import load as parse_file
from testbed.specs import STACKS, changed, spec


def busybox() -> dict:
    return spec({"t": {"base_image": "busybox:1.36"}})


def texts(data: object, source_dir: Path | str = ".", **kwargs) -> list[str]:
    return [d.text() for d in check_data(data, source_dir, **kwargs).diagnostics]


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_a_committed_stack_as_an_object_resolves_as_its_file_does(name: str):
    path = STACKS / f"{name}.yaml"
    from_file = load_stack(path)
    from_object = load_data(parse_file(path).data, STACKS)
    assert (from_object.spec, from_object.templates, from_object.hosts, from_object.pools) == (
        from_file.spec, from_file.templates, from_file.hosts, from_file.pools)


def test_a_validated_stack_model_resolves_as_its_file_does():
    path = STACKS / "dev.yaml"
    model = Stack.model_validate(parse_file(path).data)
    assert load_data(model, STACKS).templates == load_stack(path).templates


@pytest.mark.parametrize(("data", "expected"), [
    (changed(busybox(), "pools.t.replicas", -1), "<object>: $.pools.t.replicas: -1 is below the minimum 0"),
    (changed(busybox(), "templates.t.user", 5),
     "<object>: $.templates.t.user: expected a string, got integer 5: quote it"),
    (changed(busybox(), "pools.t.template", "nope"),
     "<object>: $.pools.t.template: template 'nope' is not defined; templates: t"),
], ids=["schema", "schema-type", "rule"])
def test_errors_are_located_by_json_path(data: dict, expected: str):
    assert texts(data) == [expected]
    with pytest.raises(SpecError) as raised:
        load_data(data, ".")
    assert str(raised.value) == expected


def test_an_object_has_a_name_and_no_line_in_every_format():
    [diagnostic] = check_data(changed(busybox(), "pools.t.replicas", -1), ".", name="ci-stack").diagnostics
    assert (diagnostic.line, diagnostic.column, diagnostic.located) == (0, 0, False)
    assert diagnostic.text() == "ci-stack: $.pools.t.replicas: -1 is below the minimum 0"
    assert diagnostic.github() == ("::error file=ci-stack,title=sandstack schema::$.pools.t.replicas: -1 is below "
                                   "the minimum 0")


def test_relative_paths_are_read_from_the_source_dir(tmp_path: Path):
    data = changed(busybox(), "templates.t.data", [{"source": "skills", "path": "/opt/skills"}])
    assert texts(data, tmp_path) == [f"<object>: $.templates.t.data[0].source: 'skills' is neither a file nor a "
                                     f"folder (looked in '{tmp_path.resolve()}')"]
    (tmp_path / "skills").mkdir()
    (tmp_path / "skills" / "SKILL.md").write_text("# skill\n")
    [mount] = load_data(data, tmp_path).templates["t"].data
    assert mount.files == (("SKILL.md", tmp_path / "skills" / "SKILL.md"),)


def test_values_a_file_could_not_hold_are_refused_all_at_once():
    data = changed(busybox(), "templates.t.base_image", Path("busybox"))
    data = changed(data, "templates.t.env", {1: "one"})
    data = changed(data, "templates.t.limits", {"cpus": math.nan})
    data = changed(data, "pools.t.replicas", 2**70)
    assert texts(data) == [
        "<object>: $.pools.t.replicas: integer out of range: integers in a spec fit in 64 bits",
        "<object>: $.templates.t.base_image: PosixPath is not a spec value: a spec holds mappings, lists, strings, "
        "numbers, booleans and null",
        "<object>: $.templates.t.env: key 1 must be a string",
        "<object>: $.templates.t.limits.cpus: nan is not a finite number",
    ]
    assert texts([data]) == ["<object>: $: the top level must be a mapping with 'version', 'hosts' and "
                             "'templates', got list"]


def test_an_object_that_contains_itself_stops_at_the_depth_limit():
    data = busybox()
    data["templates"]["t"]["env"] = data
    [text] = texts(data)
    assert text.startswith("<object>: $.templates.t.env.templates.t.env.")
    assert text.endswith(": nesting is deeper than 64 levels")


def test_tuples_are_lists_and_the_callers_object_is_copied():
    data = changed(busybox(), "templates.t.command", ("sleep", "1"))
    resolved = load_data(data, ".")
    data["templates"]["t"]["command"] = ("changed",)
    assert resolved.templates["t"].command == ("sleep", "1")

