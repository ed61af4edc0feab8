"""The package schema: what Pulumi infers from `sandstack.package.component` is what `package/schema.json` commits,
it is a valid Pulumi package schema (Pulumi's own metaschema, tests/package/metaschema), every input, output and
type property is described, and nothing is typed `Any`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sandstack.package.provider import render_schema
from sandstack.tooling import generate

REPO = Path(__file__).resolve().parents[2]
SCHEMA_PATH = REPO / "package" / "schema.json"
METASCHEMA = Path(__file__).parent / "metaschema" / "pulumi.json"
SCHEMA = json.loads(SCHEMA_PATH.read_text())
TOKEN = "sandstack:index:SandboxStack"


def test_the_committed_schema_is_what_pulumi_infers_from_the_component():
    assert SCHEMA_PATH.read_text() == render_schema(), f"run `{generate.REGENERATE}` and commit package/schema.json"
    assert "package/schema.json" in [g.path for g in generate.GENERATED]


def validate(path: Path) -> subprocess.CompletedProcess:
    # check-jsonschema: the metaschema's patterns are ECMA-262 (named groups `(?<major>…)`), which it supports.
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--output-format", "json", "--schemafile",
                           str(METASCHEMA), str(path)], capture_output=True, text=True, timeout=120)


def test_the_schema_is_a_valid_pulumi_package_schema(tmp_path: Path):
    assert validate(SCHEMA_PATH).returncode == 0, validate(SCHEMA_PATH).stdout

    broken = json.loads(SCHEMA_PATH.read_text())
    broken["resources"][TOKEN]["inputProperties"]["specYaml"]["type"] = "text"
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    refused = validate(tmp_path / "broken.json")
    assert refused.returncode == 1
    [error] = json.loads(refused.stdout)["errors"]
    assert error["best_deep_match"] == {
        "path": f"$.resources['{TOKEN}'].inputProperties.specYaml.type",
        "message": "'text' is not one of ['boolean', 'integer', 'number', 'string']"}


def properties(schema: dict):
    """(where, name, property) of every input, output and type property, and of their items and values."""
    def walk(where: str, name: str, prop: dict):
        yield where, name, prop
        for inner in ("items", "additionalProperties"):
            if inner in prop:
                yield from walk(f"{where}.{name}", inner, prop[inner])

    for token, resource in schema["resources"].items():
        for kind in ("inputProperties", "properties"):
            for name, prop in resource.get(kind, {}).items():
                yield from walk(f"{token}.{kind}", name, prop)
    for token, typ in schema["types"].items():
        for name, prop in typ["properties"].items():
            yield from walk(token, name, prop)


def test_every_input_output_and_type_property_is_described_and_typed_without_any():
    found = list(properties(SCHEMA))
    assert len(found) > 30
    assert [f"{w}.{n}" for w, n, p in found if not p.get("description", "").strip()] == []
    refs = {p["$ref"] for _, _, p in found if "$ref" in p}
    assert refs == {f"#/types/{t}" for t in SCHEMA["types"]}  # only the package's own types: no pulumi.json#/Any
    assert [f"{w}.{n}" for w, n, p in found if "type" not in p and "$ref" not in p] == []
    assert "pulumi.json#/Any" not in SCHEMA_PATH.read_text()
    for token, resource in {**SCHEMA["resources"], **SCHEMA["types"]}.items():
        assert resource["description"].strip(), token


def test_sandbox_stack_takes_the_spec_as_plain_yaml_text_or_a_file_and_outputs_sandboxes_hosts_runtime():
    assert list(SCHEMA["resources"]) == [TOKEN]
    stack = SCHEMA["resources"][TOKEN]
    assert stack["isComponent"] is True
    assert {name: (p["type"], p.get("plain")) for name, p in stack["inputProperties"].items()} == {
        "specYaml": ("string", True), "specFile": ("string", True), "sourceDir": ("string", True),
        "stack": ("string", True)}
    assert stack["requiredInputs"] == []
    assert sorted(stack["properties"]) == ["hosts", "runtime", "sandboxes"]
    assert stack["required"] == ["hosts", "sandboxes"]
    assert stack["properties"]["sandboxes"]["items"]["$ref"] == "#/types/sandstack:index:Sandbox"
    assert stack["properties"]["hosts"]["additionalProperties"]["$ref"] == "#/types/sandstack:index:Host"
    assert stack["properties"]["runtime"]["$ref"] == "#/types/sandstack:index:Runtime"
    assert SCHEMA["name"] == "sandstack"


@pytest.mark.parametrize("field", ["name", "pool", "template", "host", "container", "image", "digest", "version",
                                   "egress", "network", "ports"])
def test_the_sandbox_type_has_every_field_the_pools_output(field: str):
    # The names of SandboxPool's `sandboxes` entries: the provider passes them through unrenamed.
    assert field in SCHEMA["types"]["sandstack:index:Sandbox"]["properties"]
