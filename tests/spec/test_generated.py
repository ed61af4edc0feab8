"""Generated files are fresh, the schema is a valid 2020-12 schema, and every field is documented."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel

from sandstack.spec import models
from sandstack.spec.changes import MEANING
from sandstack.spec.models.base import change_of
from sandstack.spec.schema import DIALECT, SCHEMA_FILE, SCHEMA_ID
from sandstack.tooling import generate
from sandstack.tooling.cli import main
from sandstack.tooling.reference import BEGIN, END
from tests.spec.helpers import REPO, STACKS

SCHEMA = json.loads((REPO / SCHEMA_FILE).read_text(encoding="utf-8"))


def test_generated_files_are_up_to_date() -> None:
    stale = generate.stale(REPO)
    assert stale == [], f"{', '.join(stale)} stale: run `{generate.REGENERATE}` and commit the result"


def _copy_generated(tmp_path: Path) -> Path:
    """The generated files and what they are generated from besides the models (the review example's inputs)."""
    for rel in (SCHEMA_FILE, "README.md", "docs/examples/review/base.yaml", "docs/examples/review/head.yaml",
                "docs/ci/sandstack-review.yml", "docs/ci/sandstack-review-comment.yml", "docs/policy-rules.md",
                "package/schema.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    return tmp_path


def test_staleness_check_catches_an_edited_schema(tmp_path, capsys) -> None:
    root = _copy_generated(tmp_path)
    schema = root / SCHEMA_FILE
    schema.write_text(schema.read_text().replace("Spec format version", "Format version"))
    assert generate.stale(root) == [SCHEMA_FILE]
    assert main(["generate", "--check", "--root", str(root)]) == 1
    assert capsys.readouterr().err == (
        "schemas/stack.schema.json is stale: run `sandstack generate` and commit the result\n")


def test_staleness_check_catches_an_edited_reference_block(tmp_path) -> None:
    root = _copy_generated(tmp_path)
    readme = root / "README.md"
    readme.write_text(readme.read_text().replace("| `version` |", "| `versoin` |"))
    assert generate.stale(root) == ["README.md"]


def test_staleness_check_catches_missing_markers_and_files(tmp_path) -> None:
    root = _copy_generated(tmp_path)
    (root / "README.md").write_text("# sandstack\n")
    (root / SCHEMA_FILE).unlink()
    assert generate.stale(root) == [SCHEMA_FILE, "README.md"]


def test_generate_rewrites_what_is_stale_and_nothing_else(tmp_path, capsys) -> None:
    root = _copy_generated(tmp_path)
    readme = root / "README.md"
    outside = readme.read_text().replace("Sandboxes for AI agents", "Sandboxes for agents")
    readme.write_text(outside.replace("| `version` |", "| `versoin` |"))
    assert main(["generate", "--root", str(root)]) == 0
    assert capsys.readouterr().out == "wrote README.md\n"
    assert readme.read_text() == outside  # text outside the markers is kept
    assert generate.stale(root) == []
    assert main(["generate", "--root", str(root)]) == 0
    assert capsys.readouterr().out == "all generated files are up to date\n"


def test_readme_has_one_reference_block() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert readme.count(BEGIN) == 1 and readme.count(END) == 1
    assert readme.index(BEGIN) < readme.index(END)


def test_schema_is_valid_against_the_2020_12_metaschema() -> None:
    Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == DIALECT == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA["$id"] == SCHEMA_ID
    assert SCHEMA["title"] == "sandstack stack spec"


def _properties(schema: dict) -> list[tuple[str, dict]]:
    found = [(f"$.{name}", prop) for name, prop in schema["properties"].items()]
    for model, body in schema["$defs"].items():
        found += [(f"{model}.{name}", prop) for name, prop in body.get("properties", {}).items()]
    return found


@pytest.mark.parametrize(("where", "prop"), _properties(SCHEMA), ids=[w for w, _ in _properties(SCHEMA)])
def test_every_schema_property_has_a_description_and_x_change(where: str, prop: dict) -> None:
    assert prop.get("description", "").strip(), f"{where} has no description"
    assert _known_words(prop.get("x-change", "")), f"{where} has no x-change in the reference's words"


def _known_words(label: str) -> bool:
    """Each word of a Change label ('replace + guard; no idle_timeout: replace') is in the legend."""
    first, *conditions = label.split("; ")
    effects = [first] + [c.split(": ", 1)[1] for c in conditions if ": " in c]
    return bool(label) and len(effects) == 1 + len(conditions) and all(
        word in MEANING for effect in effects for word in effect.split(" + "))


def _model_fields() -> list[tuple[str, object]]:
    out = []
    for name in models.__all__:
        model = getattr(models, name)
        if isinstance(model, type) and issubclass(model, BaseModel):
            out += [(f"{name}.{field}", info) for field, info in model.model_fields.items()]
    return out


@pytest.mark.parametrize(("where", "info"), _model_fields(), ids=[w for w, _ in _model_fields()])
def test_every_model_field_has_a_description_and_x_change(where: str, info) -> None:
    assert (info.description or "").strip(), f"{where} has no description"
    assert _known_words(change_of(info).label), f"{where} has no change effect in the reference's words"


def test_every_model_is_in_the_schema() -> None:
    names = {n for n in models.__all__ if isinstance(getattr(models, n), type)} - {"Stack"}
    assert sorted(names - set(SCHEMA["$defs"])) == []


def test_optional_fields_refuse_an_explicit_null() -> None:
    """`X | None` means "inherit" in the models; the schema must not let YAML authors write `null`."""
    types: list[object] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            types.extend(v for k, v in node.items() if k == "type")
            for key, value in node.items():
                if key not in ("default", "examples", "const", "enum"):
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(SCHEMA)
    assert types and not [t for t in types if t == "null" or (isinstance(t, list) and "null" in t)]


@pytest.mark.parametrize("stack", sorted(p.name for p in STACKS.glob("*.yaml")))
def test_every_stack_file_points_editors_at_the_schema(stack: str) -> None:
    first = (STACKS / stack).read_text(encoding="utf-8").splitlines()[0]
    assert first == "# yaml-language-server: $schema=../schemas/stack.schema.json"
