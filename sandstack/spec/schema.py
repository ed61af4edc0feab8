"""The JSON Schema of a stack file, generated from the pydantic models (the one source of truth).

`sandstack generate` writes it to `schemas/stack.schema.json`; a test fails when the committed
file differs from what the models generate. Validation reads that file, installed as package data
(`published_schema`), rather than generating it again at every start.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib.resources import files
from typing import Any

from pydantic.json_schema import GenerateJsonSchema

from sandstack.spec.models import Stack

SCHEMA_ID = "https://sandstack.dev/schemas/v1/stack.schema.json"
DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_FILE = "schemas/stack.schema.json"


class _SpecSchema(GenerateJsonSchema):
    """Pydantic's generator, adjusted so the schema says what a YAML author may write."""

    def nullable_schema(self, schema):  # type: ignore[override]
        # `X | None` means "unset, inherit" in the models; an explicit `null` in YAML is refused.
        return self.generate_inner(schema["schema"])

    def field_title_should_be_set(self, schema) -> bool:  # type: ignore[override]
        return False

    def default_schema(self, schema):  # type: ignore[override]
        result = super().default_schema(schema)
        if result.get("default", 0) is None:
            del result["default"]
        return result

    def dict_schema(self, schema):  # type: ignore[override]
        # Constrained keys become `propertyNames` so a bad name is an error, not an ignored key.
        result = super().dict_schema(schema)
        patterns = result.pop("patternProperties", None)
        if patterns:
            ((pattern, value_schema),) = patterns.items()
            result["propertyNames"] = self._key_schema(schema, pattern)
            result["additionalProperties"] = value_schema
        return result

    def _key_schema(self, schema, pattern: str) -> dict[str, Any]:
        key_json = self.generate_inner(schema["keys_schema"])
        return key_json if key_json.get("pattern") == pattern else {"pattern": pattern}


def _sort_keys(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _sort_keys(node[k]) for k in node}
    if isinstance(node, list):
        return [_sort_keys(v) for v in node]
    return node


@lru_cache(maxsize=1)
def stack_schema() -> dict[str, Any]:
    body = Stack.model_json_schema(schema_generator=_SpecSchema, mode="validation")
    schema: dict[str, Any] = {"$schema": DIALECT, "$id": SCHEMA_ID}
    schema.update(body)
    schema["title"] = "sandstack stack spec"
    return _sort_keys(schema)


@lru_cache(maxsize=1)
def published_schema() -> dict[str, Any]:
    """The schema as published (`schemas/stack.schema.json`, the package's `sandstack.schemas` data): the one
    an editor and check-jsonschema read. Generated from the models when the file is not installed."""
    try:
        return json.loads(files("sandstack.schemas").joinpath("stack.schema.json").read_text(encoding="utf-8"))
    except (ModuleNotFoundError, FileNotFoundError):
        return stack_schema()


def render_schema() -> str:
    """The exact text of `schemas/stack.schema.json`."""
    return json.dumps(stack_schema(), indent=2, ensure_ascii=False) + "\n"
