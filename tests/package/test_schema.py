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
        for name, prop in typ.get("properties", {}).items():
            yield from walk(token, name, prop)


def refs(prop: dict) -> set[str]:
    return {prop["$ref"]} if "$ref" in prop else set().union(*(refs(b) for b in prop.get("oneOf", [])))


def test_every_input_output_and_type_property_is_described_and_typed_without_any():
    found = list(properties(SCHEMA))
    assert len(found) > 200
    assert [f"{w}.{n}" for w, n, p in found if not p.get("description", "").strip()] == []
    referenced = set().union(*(refs(p) for _, _, p in found))
    assert referenced == {f"#/types/{t}" for t in SCHEMA["types"]}  # only the package's own types: no pulumi.json#/Any
    assert [f"{w}.{n}" for w, n, p in found if not {"type", "$ref", "oneOf"} & set(p)] == []
    assert "pulumi.json#/Any" not in SCHEMA_PATH.read_text()
    for token, resource in {**SCHEMA["resources"], **SCHEMA["types"]}.items():
        assert resource["description"].strip(), token


def test_sandbox_stack_takes_the_spec_typed_as_yaml_text_or_a_file_and_outputs_sandboxes_hosts_runtime():
    assert list(SCHEMA["resources"]) == [TOKEN]
    stack = SCHEMA["resources"][TOKEN]
    assert stack["isComponent"] is True
    inputs = dict(stack["inputProperties"])
    # The typed spec is not plain: any value in it may be another resource's output.
    assert inputs.pop("spec") == {"$ref": "#/types/sandstack:spec:Stack",
                                  "description": inputs_description("spec")}
    assert {name: (p["type"], p.get("plain")) for name, p in inputs.items()} == {
        "specYaml": ("string", True), "specFile": ("string", True), "sourceDir": ("string", True),
        "stack": ("string", True)}
    assert stack["requiredInputs"] == []
    assert sorted(stack["properties"]) == ["hosts", "runtime", "sandboxes"]
    assert stack["required"] == ["hosts", "sandboxes"]
    assert stack["properties"]["sandboxes"]["items"]["$ref"] == "#/types/sandstack:index:Sandbox"
    assert stack["properties"]["hosts"]["additionalProperties"]["$ref"] == "#/types/sandstack:index:Host"
    assert stack["properties"]["runtime"]["$ref"] == "#/types/sandstack:index:Runtime"
    assert SCHEMA["name"] == "sandstack"


def inputs_description(name: str) -> str:
    return SCHEMA["resources"][TOKEN]["inputProperties"][name]["description"]


def test_the_schema_carries_the_package_metadata_and_no_licence_the_repository_does_not_declare():
    assert {k: SCHEMA.get(k) for k in ("homepage", "repository", "publisher", "license", "pluginDownloadURL")} == {
        "homepage": "<git-host>/<org>/sandstack", "repository": "<git-host>/<org>/sandstack",
        "publisher": "sandstack", "license": None, "pluginDownloadURL": None}
    assert "<git-host>/<org>/sandstack" in (REPO / "README.md").read_text()  # the README's own placeholder
    assert {"kind/component", "sandstack"} <= set(SCHEMA["keywords"])
    assert SCHEMA["description"].strip()


def test_the_runtime_token_output_is_secret():
    assert SCHEMA["types"]["sandstack:index:RuntimeHost"]["properties"]["token"]["secret"] is True
    assert [f"{w}.{n}" for w, n, p in properties(SCHEMA) if p.get("secret")] == [
        "sandstack:index:RuntimeHost.token", "sandstack:spec:Template.env", "sandstack:spec:TemplateDefaults.env"]


def spec_type(name: str) -> dict:
    return SCHEMA["types"][f"sandstack:spec:{name}"]


def enum_values(prop: dict) -> list:
    return [v["value"] for v in SCHEMA["types"][prop["$ref"].removeprefix("#/types/")]["enum"]]


def test_the_typed_spec_has_object_types_enums_maps_and_unions_from_the_models():
    stack = spec_type("Stack")
    assert sorted(stack["properties"]) == ["defaults", "description", "hosts", "policy", "pools", "profiles",
                                           "templates", "version"]
    assert stack["required"] == ["hosts", "templates", "version"]
    assert stack["properties"]["templates"]["additionalProperties"]["$ref"] == "#/types/sandstack:spec:Template"
    assert stack["properties"]["hosts"]["additionalProperties"]["$ref"] == "#/types/sandstack:spec:Host"
    assert spec_type("Host")["properties"]["runtime"]["$ref"] == "#/types/sandstack:spec:RuntimeService"
    # Closed sets are enums: egress, exposure, protocol, isolation runtime, capabilities, the spec version.
    network, port = spec_type("NetworkPolicy")["properties"], spec_type("Port")["properties"]
    assert enum_values(network["egress"]) == ["deny-all", "allow-list", "allow-all"]
    assert enum_values(port["exposure"]) == ["none", "host", "public", "url"]
    assert enum_values(port["protocol"]) == ["tcp", "udp"]
    assert port["protocol"]["$ref"] == "#/types/sandstack:spec:PortProtocol"
    assert spec_type("RuntimeService")["properties"]["exposure"]["$ref"] == "#/types/sandstack:spec:Exposure"
    assert spec_type("Ingress")["properties"]["exposure"]["$ref"] == "#/types/sandstack:spec:Exposure"
    assert enum_values(spec_type("Template")["properties"]["runtime"]) == ["runc", "runsc"]
    assert spec_type("Security")["properties"]["capabilities"]["items"]["$ref"] == "#/types/sandstack:spec:Capability"
    assert spec_type("StackVersion")["enum"] == [{"value": 1, "name": "V1"}]
    # Pulumi's names, camel-cased; the field's description and its format hint.
    template = spec_type("Template")["properties"]
    assert {"baseImage", "extends", "limits", "env", "ports"} <= set(template)
    assert template["baseImage"]["description"].startswith("Image the snapshot starts from")
    assert "Format: an image reference" in template["baseImage"]["description"]
    # Unions: a profile's name or fields; a size as text or bytes; an env value as text or a secret reference.
    assert template["limits"]["oneOf"] == [{"type": "string"}, {"$ref": "#/types/sandstack:spec:LimitsOverride"}]
    assert spec_type("Limits")["properties"]["memory"]["oneOf"] == [{"type": "integer"}, {"type": "string"}]
    assert template["env"]["additionalProperties"]["oneOf"] == [
        {"type": "string"}, {"$ref": "#/types/sandstack:spec:SecretRef"}]


@pytest.mark.parametrize("field", ["name", "pool", "template", "host", "container", "image", "digest", "version",
                                   "egress", "network", "ports"])
def test_the_sandbox_type_has_every_field_the_pools_output(field: str):
    # The names of SandboxPool's `sandboxes` entries: the provider passes them through unrenamed.
    assert field in SCHEMA["types"]["sandstack:index:Sandbox"]["properties"]
