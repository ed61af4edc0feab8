"""The package's typed `spec` input, generated from the spec's JSON Schema (`sandstack.spec.schema.stack_schema`, which
the pydantic models generate): the one source of `schemas/stack.schema.json` is the one source of these types too.

One walk over the JSON Schema maps it to Pulumi's package schema, in the module `spec` (`sandstack:spec:<Name>`):

- each model (`$defs`, and the root `Stack`) is an object type: its fields camel-cased as Pulumi names properties
  (`base_image` is `baseImage`), each with the field's description, `required` as the model requires;
- each closed set (`Literal[...]`: an `enum` or a `const`) is an enum type, named after its field, prefixed with its
  model's name unless one set of values serves that field in several models (`exposure` of an ingress and of a
  runtime service is `Exposure`, a port's is `PortExposure`);
- a `dict` is a map (its keys are data: names of hosts, templates, variables), a `list` an array;
- a union (`anyOf`: a size is `512MiB` or a number of bytes, a template's `limits` a profile's name or fields, an
  env value a text or a `{secret: KEY}` reference) is a Pulumi union (`oneOf`), which every SDK types as such;
- a property whose value may be a literal where a secret reference may stand (an env value) is `secret: true`.

What Pulumi's schema cannot say (a pattern, a range, a length, the form of a map's keys) stays in the description
(its hint, e.g. "Format: lowercase letters, …") and is checked by the same validation as a YAML spec.

`SpecTypes` also converts between the two namings: `to_spec` turns a typed value (Pulumi's names) into the mapping a
spec file parses to, and `typed_path` turns a diagnostic's JSON path back into the names the program wrote.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from pulumi.provider.experimental.util import camel_case

from sandstack.spec.models.base import CONFIG_KEY_PATTERN
from sandstack.spec.schema import stack_schema

PACKAGE = "sandstack"
MODULE = "spec"
ROOT = "Stack"
PRIMITIVES = ("boolean", "integer", "number", "string")
_PATH_PART = re.compile(r'\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


def token(name: str) -> str:
    return f"{PACKAGE}:{MODULE}:{name}"


def _pascal(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", name) if part)


def _ref_name(ref: str) -> str:
    """The type's name in `#/$defs/<name>` or `#/types/sandstack:spec:<name>`."""
    return ref.rsplit("/", 1)[-1].rsplit(":", 1)[-1]


@dataclass
class SpecTypes:
    """The `spec` input's property, the types it references (by token), and each object type's names."""

    root: dict[str, Any]
    types: dict[str, dict[str, Any]]  # by name (`Template`); `schema_types` by token
    fields: dict[str, dict[str, str]] = field(default_factory=dict)  # object type -> {Pulumi name: field name}

    def schema_types(self) -> dict[str, dict[str, Any]]:
        """The types as the package schema's `types` holds them, by token."""
        return {token(name): spec for name, spec in self.types.items()}

    def to_spec(self, value: Any) -> Any:
        """A typed value (Pulumi's names; numbers as the wire sends them, floats) as a spec file's mapping."""
        return self._convert(value, self.root, to_spec=True)

    def from_spec(self, value: Any) -> Any:
        """A spec file's mapping as the typed value a program passes (Pulumi's names)."""
        return self._convert(value, self.root, to_spec=False)

    def _convert(self, value: Any, spec: dict[str, Any], to_spec: bool) -> Any:
        ref = spec.get("$ref")
        if ref:
            typ = self.types[_ref_name(ref)]
            if "enum" in typ:
                return _number(value, typ["type"])
            if not isinstance(value, dict):
                return value  # not an object where one belongs: validation says so, naming the path
            names = self.fields[_ref_name(ref)]
            if not to_spec:
                names = {f: p for p, f in names.items()}
            props = typ["properties"]
            return {names.get(k, k): self._convert(v, props[k if to_spec else names.get(k, k)], to_spec)
                    if (k if to_spec else names.get(k, k)) in props else v for k, v in value.items()}
        if "oneOf" in spec:
            branches = spec["oneOf"]
            objects = [b for b in branches if "$ref" in b and "properties" in self.types[_ref_name(b["$ref"])]]
            if isinstance(value, dict) and objects:
                return self._convert(value, objects[0], to_spec)
            kinds = {b.get("type") for b in branches}
            return _number(value, "integer") if "integer" in kinds and "number" not in kinds else value
        kind = spec.get("type")
        if kind == "array" and isinstance(value, list):
            return [self._convert(v, spec["items"], to_spec) for v in value]
        if kind == "object" and isinstance(value, dict):
            # A map's order on Pulumi's wire is no order (protobuf maps): in name order, one plan whatever it was.
            keys = sorted(value) if to_spec else list(value)
            return {k: self._convert(value[k], spec["additionalProperties"], to_spec) for k in keys}
        return _number(value, kind)

    def locate(self, path: str, prefix: str = "spec") -> tuple[str, bool]:
        """A diagnostic's JSON path (`$.templates.python.base_image`) in the program's names
        (`spec.templates.python.baseImage`), and whether a property on the way is secret."""
        parts, secret = self._walk(path)
        out = prefix
        for part in parts:
            if isinstance(part, int):
                out += f"[{part}]"
            elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", part):
                out += f".{part}"
            else:
                out += f"[{json.dumps(part)}]"
        return out, secret

    def typed_parts(self, path: str) -> tuple[str | int, ...]:
        """A diagnostic's JSON path as keys and indexes in the program's names."""
        return self._walk(path)[0]

    def _walk(self, path: str) -> tuple[tuple[str | int, ...], bool]:
        parts: list[str | int] = []
        spec: dict[str, Any] = self.root
        secret = False
        for match in _PATH_PART.finditer(path):
            name, index, quoted = match.groups()
            if index is not None:
                parts.append(int(index))
                spec = spec.get("items", {})
                continue
            key = name if name is not None else json.loads(quoted)
            objects = [b for b in [spec, *spec.get("oneOf", [])] if _ref_name(b.get("$ref", "")) in self.fields]
            if objects:  # an object type (or a union's object branch): the field's Pulumi name
                type_name = _ref_name(objects[0]["$ref"])
                shown = {f: p for p, f in self.fields[type_name].items()}.get(key, key)
                spec = self.types[type_name]["properties"].get(shown, {})
            else:  # a map: its keys are data
                shown = key
                spec = spec.get("additionalProperties", {})
            secret = secret or bool(spec.get("secret"))
            parts.append(shown)
        return tuple(parts), secret


def _number(value: Any, kind: str | None) -> Any:
    # Pulumi's wire sends every number as a float; a spec file's integer is an int (sizes, ports, counts).
    if kind == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class _Builder:
    def __init__(self, schema: dict[str, Any]):
        self.schema = schema
        self.defs: dict[str, Any] = dict(schema.get("$defs", {}))
        self.defs[ROOT] = schema
        self.types: dict[str, dict[str, Any]] = {}
        self.fields: dict[str, dict[str, str]] = {}
        self.enum_names = self._enum_names()

    # Enums: every closed set, found first so that a set several models share gets one name.
    def _enums(self):
        for owner, node in sorted(self.defs.items()):
            for name, prop in node.get("properties", {}).items():
                yield from self._enums_in(owner, name, prop, item=False)

    def _enums_in(self, owner: str, name: str, node: dict[str, Any], item: bool):
        if "enum" in node or "const" in node:
            yield owner, name, item, _values(node)
        for branch in node.get("anyOf", []):
            yield from self._enums_in(owner, name, branch, item)
        if isinstance(node.get("items"), dict):
            yield from self._enums_in(owner, name, node["items"], True)
        if isinstance(node.get("additionalProperties"), dict):
            yield from self._enums_in(owner, name, node["additionalProperties"], item)

    def _enum_names(self) -> dict[tuple, str]:
        owners: dict[tuple, list[str]] = defaultdict(list)
        for owner, name, item, values in self._enums():
            owners[(name, item, values)].append(owner)
        names: dict[tuple, str] = {}
        for (name, item, values), found in owners.items():
            base = _pascal(_singular(name) if item else name)
            names[(name, item, values)] = base if len(found) > 1 else found[0] + base
        taken = list(names.values()) + list(self.defs)
        clashes = sorted({n for n in taken if taken.count(n) > 1})
        if clashes:
            raise ValueError(f"spec types: two types would be named {clashes}")
        return names

    def enum(self, owner: str, name: str, node: dict[str, Any], item: bool) -> str:
        values = _values(node)
        type_name = self.enum_names[(name, item, values)]
        if type_name not in self.types:
            sharing = sorted(f"`{o}.{camel_case(n)}`" for o, n, i, v in self._enums() if (n, i, v) == (name, item, values))
            kind = {bool: "boolean", int: "integer", float: "number", str: "string"}[type(values[0])]
            self.types[type_name] = {
                "type": kind, "description": f"The values of {' and '.join(sharing)}.",
                "enum": [{"value": v, **({"name": f"V{v}"} if kind != "string" else {})} for v in values]}
        return type_name

    def object_type(self, name: str) -> str:
        if name not in self.types:
            node = self.defs[name]
            self.types[name] = {}  # a model that refers to itself finds its name taken
            names = {camel_case(f): f for f in node["properties"]}
            if len(names) != len(node["properties"]):
                raise ValueError(f"spec types: two fields of {name} have one Pulumi name")
            self.fields[name] = names
            self.types[name] = {
                "type": "object", "description": node.get("description", "").strip() or name,
                "properties": {p: self.property(name, f, node["properties"][f]) for p, f in names.items()},
                "required": sorted(camel_case(f) for f in node.get("required", []))}
        return name

    def property(self, owner: str, name: str, node: dict[str, Any]) -> dict[str, Any]:
        description = node.get("description") or self._described(node) or name
        hints = [f"Format: {_hint(node)}." if _hint(node) else "",
                 f"Keys: {_hint(node['propertyNames'])}." if _hint(node.get("propertyNames", {})) else ""]
        description = " ".join([description.strip(), *[h for h in hints if h]])
        spec = self.type_of(owner, name, node, description, item=False)
        if _may_hold_secret(node, self.defs):
            spec["secret"] = True
        return {"description": description, **spec}

    def _described(self, node: dict[str, Any]) -> str:
        ref = node.get("$ref")
        return self.defs[_ref_name(ref)].get("description", "") if ref else ""

    def type_of(self, owner: str, name: str, node: dict[str, Any], description: str, item: bool) -> dict[str, Any]:
        if "$ref" in node:
            return {"$ref": f"#/types/{token(self.object_type(_ref_name(node['$ref'])))}"}
        if "enum" in node or "const" in node:
            return {"$ref": f"#/types/{token(self.enum(owner, name, node, item))}"}
        if "anyOf" in node:
            return {"oneOf": [self.type_of(owner, name, b, description, item) for b in node["anyOf"]]}
        kind = node.get("type")
        if kind == "array":
            return {"type": "array", "items": {"description": description,
                                               **self.type_of(owner, name, node["items"], description, True)}}
        if kind == "object":
            values = node.get("additionalProperties") or {"type": "string"}
            return {"type": "object", "additionalProperties": {
                "description": description, **self.type_of(owner, name, values, description, item)}}
        if kind in PRIMITIVES:
            return {"type": kind}
        raise ValueError(f"spec types: no Pulumi type for {owner}.{name}: {json.dumps(node)[:200]}")


def _singular(name: str) -> str:
    return name[:-3] + "y" if name.endswith("ies") else name.removesuffix("s")


def _values(node: dict[str, Any]) -> tuple:
    return tuple(node["enum"]) if "enum" in node else (node["const"],)


def _hint(node: dict[str, Any]) -> str:
    return node.get("x-hint", "")


def _is_secret_ref(node: dict[str, Any], defs: dict[str, Any]) -> bool:
    """A `{secret: KEY}` reference: an object whose `secret` is a Pulumi config key (as schema_errors tells it)."""
    target = defs.get(_ref_name(node["$ref"]), {}) if "$ref" in node else node
    return target.get("properties", {}).get("secret", {}).get("pattern") == CONFIG_KEY_PATTERN


def _may_hold_secret(node: dict[str, Any], defs: dict[str, Any]) -> bool:
    """A literal where a secret reference may stand instead (an env value): the literal may be a credential."""
    branches = node.get("anyOf", [])
    if any(_is_secret_ref(b, defs) for b in branches) and any(b.get("type") == "string" for b in branches):
        return True
    inner = [node.get("items"), node.get("additionalProperties")]
    return any(isinstance(i, dict) and _may_hold_secret(i, defs) for i in inner)


def build(schema: dict[str, Any], description: str) -> SpecTypes:
    """The Pulumi types of a JSON Schema whose root is an object and whose models are in `$defs`."""
    builder = _Builder(schema)
    root = {"description": description, "$ref": f"#/types/{token(builder.object_type(ROOT))}"}
    return SpecTypes(root, builder.types, builder.fields)


SPEC_DESCRIPTION = (
    "The sandstack spec as typed values (what a `stacks/<stack>.yaml` file holds, with Pulumi's names: `baseImage` "
    "for `base_image`). Any value may be an output of another resource (an image digest, a host's address); the "
    "component waits for them before planning. Validated as `sandstack validate` validates a file: errors name the "
    "path, e.g. `spec.templates.python.limits.memory`.")


@lru_cache(maxsize=1)
def spec_types() -> SpecTypes:
    """The typed `spec` input of the package, from the models' JSON Schema."""
    return build(stack_schema(), SPEC_DESCRIPTION)
