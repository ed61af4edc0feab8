"""The typed-spec generator (sandstack.package.spec_types) on small JSON Schemas, then on the spec's own: what each
JSON Schema form becomes in Pulumi's schema, how enums are named, and the conversions between the two namings."""

from __future__ import annotations

import pytest
import yaml

from sandstack.package.spec_types import build, spec_types
from sandstack.spec import load_data, load_stack
from sandstack.spec.models.base import CONFIG_KEY_PATTERN
from testbed.specs import STACKS

TOY = {
    "type": "object", "description": "A toy.", "required": ["base_image", "items"],
    "properties": {
        "base_image": {"type": "string", "description": "An image.", "x-hint": "an image reference"},
        "items": {"type": "object", "description": "Items by name.", "additionalProperties": {"$ref": "#/$defs/Item"},
                  "propertyNames": {"pattern": "^[a-z]+$", "x-hint": "lowercase letters"}},
        "version": {"const": 1, "type": "integer", "description": "Always 1."},
    },
    "$defs": {
        "Item": {"type": "object", "description": "An item.", "properties": {
            "exposure": {"enum": ["host", "public"], "type": "string", "description": "Where."},
            "size": {"anyOf": [{"type": "integer"}, {"type": "string"}], "description": "How big."},
            "tags": {"type": "array", "items": {"enum": ["a", "b"], "type": "string"}, "description": "Tags."},
            "env": {"type": "object", "description": "Variables.", "additionalProperties": {
                "anyOf": [{"type": "string"}, {"$ref": "#/$defs/Ref"}]}},
        }},
        "Other": {"type": "object", "description": "Another.", "properties": {
            "exposure": {"enum": ["host", "public"], "type": "string", "description": "Where too."},
            "mode": {"enum": ["x", "y"], "type": "string", "description": "A mode."},
        }},
        "Ref": {"type": "object", "description": "A secret reference.", "required": ["secret"], "properties": {
            "secret": {"type": "string", "pattern": CONFIG_KEY_PATTERN, "description": "The config key."}}},
    },
}


def toy():
    schema = {**TOY, "properties": {**TOY["properties"], "other": {"$ref": "#/$defs/Other", "description": "O."}}}
    return build(schema, "The toy spec.")


def test_models_become_object_types_with_pulumi_names_descriptions_hints_and_required():
    types = toy()
    assert types.root == {"description": "The toy spec.", "$ref": "#/types/sandstack:spec:Stack"}
    stack = types.types["Stack"]
    assert stack["description"] == "A toy."
    assert stack["required"] == ["baseImage", "items"]
    assert stack["properties"]["baseImage"] == {"description": "An image. Format: an image reference.",
                                                "type": "string"}
    assert stack["properties"]["items"] == {
        "description": "Items by name. Keys: lowercase letters.", "type": "object",
        "additionalProperties": {"description": "Items by name. Keys: lowercase letters.",
                                 "$ref": "#/types/sandstack:spec:Item"}}
    assert types.fields["Stack"] == {"baseImage": "base_image", "items": "items", "version": "version",
                                     "other": "other"}


def test_closed_sets_become_enums_named_after_their_field_shared_where_several_models_have_them():
    types = toy()
    item, other = types.types["Item"]["properties"], types.types["Other"]["properties"]
    assert item["exposure"]["$ref"] == other["exposure"]["$ref"] == "#/types/sandstack:spec:Exposure"
    assert types.types["Exposure"] == {"type": "string", "description": "The values of `Item.exposure` and "
                                       "`Other.exposure`.", "enum": [{"value": "host"}, {"value": "public"}]}
    assert other["mode"]["$ref"] == "#/types/sandstack:spec:OtherMode"  # one model's set: prefixed with it
    assert item["tags"]["items"]["$ref"] == "#/types/sandstack:spec:ItemTag"  # a list's item: singular
    assert types.types["StackVersion"]["enum"] == [{"value": 1, "name": "V1"}]
    assert types.types["StackVersion"]["type"] == "integer"


def test_unions_are_pulumi_unions_and_a_literal_beside_a_secret_reference_is_secret():
    item = toy().types["Item"]["properties"]
    assert item["size"] == {"description": "How big.", "oneOf": [{"type": "integer"}, {"type": "string"}]}
    assert item["env"]["secret"] is True
    assert item["env"]["additionalProperties"]["oneOf"] == [{"type": "string"},
                                                            {"$ref": "#/types/sandstack:spec:Ref"}]
    assert "secret" not in item["size"]


def test_a_schema_form_pulumi_has_no_type_for_is_refused_by_name():
    schema = {"type": "object", "properties": {"x": {"description": "X.", "type": "null"}}}
    with pytest.raises(ValueError, match=r"no Pulumi type for Stack\.x"):
        build(schema, "S.")


def test_two_fields_with_one_pulumi_name_are_refused():
    schema = {"type": "object", "properties": {"a_b": {"type": "string"}, "aB": {"type": "string"}}}
    with pytest.raises(ValueError, match="two fields of Stack have one Pulumi name"):
        build(schema, "S.")


def test_to_spec_renames_fields_not_map_keys_sorts_maps_and_makes_wire_floats_integers():
    types = toy()
    typed = {"baseImage": "x", "version": 1.0, "items": {"zed": {"size": 512.0, "env": {"API_KEY": {"secret": "k"},
                                                                                      "HOME": "/h"}},
                                                        "abc": {"size": "1GiB", "tags": ["a"]}}}
    spec = types.to_spec(typed)
    assert spec == {"base_image": "x", "version": 1, "items": {
        "abc": {"size": "1GiB", "tags": ["a"]},
        "zed": {"size": 512, "env": {"API_KEY": {"secret": "k"}, "HOME": "/h"}}}}
    assert list(spec["items"]) == ["abc", "zed"] and list(spec["items"]["zed"]["env"]) == ["API_KEY", "HOME"]
    assert isinstance(spec["items"]["zed"]["size"], int) and isinstance(spec["version"], int)
    assert types.from_spec(spec) == {**typed, "version": 1, "items": {**typed["items"],
                                                                      "zed": {**typed["items"]["zed"], "size": 512}}}


def test_locate_names_a_diagnostics_path_as_the_program_wrote_it_and_whether_it_is_secret():
    types = toy()
    assert types.locate("$.base_image") == ("spec.baseImage", False)
    assert types.locate('$.items.zed.env.API_KEY') == ("spec.items.zed.env.API_KEY", True)
    assert types.locate('$.items["odd key"].tags[1]') == ('spec.items["odd key"].tags[1]', False)
    assert types.locate("$.unknown_field.x") == ("spec.unknown_field.x", False)
    assert types.typed_parts("$.items.zed.tags[0]") == ("items", "zed", "tags", 0)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_each_committed_stack_goes_to_typed_values_and_back_unchanged_and_resolves_alike(stack: str):
    data = yaml.safe_load((STACKS / f"{stack}.yaml").read_text())
    typed = spec_types().from_spec(data)
    assert "base_image" not in repr(typed) and "baseImage" in repr(typed)
    assert spec_types().to_spec(typed) == data
    resolved = load_data(spec_types().to_spec(typed), STACKS)
    assert resolved.templates == load_stack(STACKS / f"{stack}.yaml").templates
