"""JSON Schema validation of a parsed spec, with messages a person can act on.

jsonschema's own messages ("'x' is not valid under any of the given schemas") name neither the
allowed values nor the fix. Each validator keyword gets a message here that names the bad value
and what is allowed, using the schema's own `x-hint`, `enum` and `properties`.
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Iterator

from sandstack.spec.credentials import secret_env_path
from sandstack.spec.errors import Diagnostic
from sandstack.spec.loader import Document
from sandstack.spec.models.base import CONFIG_KEY_PATTERN
from sandstack.spec.schema import published_schema
from sandstack.spec.schema_gate import schema_valid
from sandstack.spec.units import unitless_duration

if TYPE_CHECKING:  # jsonschema is imported only when the gate found an error to explain (schema_gate.py)
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError

_TYPE_NAMES = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


@lru_cache(maxsize=1)
def _validator() -> Draft202012Validator:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(published_schema())


def schema_diagnostics(doc: Document) -> list[Diagnostic]:
    """Every schema violation in the document, each located and explained."""
    if schema_valid(doc.data):
        return []
    out: list[Diagnostic] = []
    for error in _validator().iter_errors(doc.data):
        out.extend(_explain(error, doc, {}))
    return out


def describe(value: Any) -> str:
    """A value as a message shows it: its kind and, for scalars, the value itself."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if value is None:
        return "null"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value:g}"
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:57] + "..."
        return f"string {shown!r}"
    if isinstance(value, dict):
        return "a mapping"
    return "a list"


def _secret_ref(schema: dict) -> bool:
    """Whether a schema is a secret reference (`{secret: KEY}`): an object whose `secret` is a config key."""
    return schema.get("properties", {}).get("secret", {}).get("pattern") == CONFIG_KEY_PATTERN


def _kind(value: Any) -> str:
    """What a value is, without the value."""
    if isinstance(value, str):
        return "a plain string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return "null" if value is None else "a mapping" if isinstance(value, dict) else "a list"


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, str) and len(value) <= 60 else describe(value)


def _explain(error: ValidationError, doc: Document, outer: dict[str, Any]) -> Iterator[Diagnostic]:
    path = tuple(error.absolute_path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    # A branch of an anyOf inherits the title and hint of the anyOf (e.g. a size's two forms).
    hints = {k: schema.get(k, outer.get(k)) for k in ("title", "x-hint")}
    keyword = error.validator
    value = error.instance

    def at(message: str, sub: tuple = (), key: bool = False) -> Diagnostic:
        return doc.diagnostic(path + sub, message, "schema", key=key)

    if secret_env_path(path) and (keyword == "type" or keyword in ("anyOf", "oneOf")
                                  and not isinstance(value, (str, dict))):
        # A variable whose name says it holds a secret: whatever is wrong with its value, the value is not shown.
        yield at(f"expected a string or {{secret: KEY}}, got {_kind(value)} (value not shown)")
    elif secret_env_path(path) and keyword in ("minLength", "maxLength"):
        bound = "at least" if keyword == "minLength" else "at most"
        yield at(f"has {len(value)} characters; {bound} {error.validator_value} allowed (value not shown)")
    elif _secret_ref(schema) and keyword in ("type", "anyOf", "oneOf"):
        # Where a secret reference belongs, a plain value is most likely the secret itself: never shown.
        yield at(f"expected {{secret: KEY}}, got {_kind(value)} (value not shown)")
    elif schema.get("pattern") == CONFIG_KEY_PATTERN:
        yield at(f"expected a config key ({schema.get('x-hint', 'a Pulumi config key')}), got {_kind(value)} that "
                 "is not one (value not shown)")
    elif "propertyNames" in error.relative_schema_path:
        # jsonschema checks a key against `propertyNames` at the mapping's path; point at the key itself.
        title = schema.get("title", "name")
        hint = schema.get("x-hint")
        yield at(f"{_shown(value)} is not a valid {title}" + (f": use {hint}" if hint else ""), (value,), key=True)
    elif keyword in ("anyOf", "oneOf"):
        yield from _explain_union(error, doc, hints)
    elif keyword == "type" and ("const" in schema or "enum" in schema):
        # The const/enum error on the same value names both the value and what is allowed: one message.
        return
    elif keyword in ("type", "pattern") and hints.get("title") == "duration" and unitless_duration(value):
        # 7200 or '7200': name the fix at once (it took 'quote it', then 'not a valid duration').
        yield at(unitless_duration(value) or "")
    elif keyword == "type":
        expected = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        wanted = " or ".join(_TYPE_NAMES.get(t, t) for t in expected)
        fix = ": quote it" if "string" in expected and isinstance(value, (int, float, bool)) else ""
        yield at(f"expected {wanted}, got {describe(value)}{fix}")
    elif keyword == "required":
        properties = schema.get("properties", {})
        for name in error.validator_value:
            if isinstance(value, dict) and name not in value:
                what = _first_sentence(properties.get(name, {}).get("description", ""))
                yield at(f"missing required field {name!r}" + (f" ({what})" if what else ""))
    elif keyword == "additionalProperties":
        allowed = list(schema.get("properties", {}))
        for name in value:
            if name not in allowed:
                yield at(_unknown_field(name, allowed), (name,), key=True)
    elif keyword == "enum":
        yield at(_not_one_of(value, error.validator_value))
    elif keyword == "const":
        yield at(f"must be {error.validator_value!r}, got {describe(value)}")
    elif keyword == "pattern":
        title = hints.get("title") or "value"
        hint = hints.get("x-hint")
        yield at(f"{_shown(value)} is not a valid {title}" + (f": use {hint}" if hint else ""))
    elif keyword in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        words = {
            "minimum": "below the minimum",
            "exclusiveMinimum": "not above",
            "maximum": "above the maximum",
            "exclusiveMaximum": "not below",
        }
        yield at(f"{value!r} is {words[keyword]} {error.validator_value!r}")
    elif keyword in ("minLength", "maxLength"):
        bound = "at least" if keyword == "minLength" else "at most"
        yield at(f"{_shown(value)} has {len(value)} characters; {bound} {error.validator_value} allowed")
    elif keyword in ("minItems", "maxItems"):
        bound = "at least" if keyword == "minItems" else "at most"
        yield at(f"has {len(value)} items; {bound} {error.validator_value} allowed")
    elif keyword in ("minProperties", "maxProperties"):
        bound = "at least {} required" if keyword == "minProperties" else "at most {} allowed"
        yield at(f"has {len(value)} entries; {bound.format(error.validator_value)}")
    elif keyword == "uniqueItems":
        yield at("has duplicate items; each item may appear once")
    else:
        yield at(error.message)


def _explain_union(error: ValidationError, doc: Document, hints: dict[str, Any]) -> Iterator[Diagnostic]:
    """Pick the branch whose type matches the value and explain its errors; else name the forms."""
    branches: dict[int, list[ValidationError]] = {i: [] for i in range(len(error.validator_value))}
    for sub in error.context or []:
        branches[sub.relative_schema_path[0]].append(sub)
    fitting = [
        errs for errs in branches.values() if not any(e.validator == "type" and not e.relative_path for e in errs)
    ]
    if fitting:
        for sub in min(fitting, key=len):
            yield from _explain(sub, doc, hints)
        return
    kinds = []
    for branch in error.validator_value:
        kind = branch.get("type") if isinstance(branch, dict) else None
        kinds.append(_TYPE_NAMES.get(kind, "a mapping") if kind else "a mapping")
    title = hints.get("title")
    hint = hints.get("x-hint")
    expected = f"{title} ({hint})" if title and hint else " or ".join(dict.fromkeys(kinds))
    yield doc.diagnostic(tuple(error.absolute_path), f"expected {expected}, got {describe(error.instance)}", "schema")


def _unknown_field(name: str, allowed: list[str]) -> str:
    guess = difflib.get_close_matches(name, allowed, n=1)
    suggestion = f"; did you mean {guess[0]!r}?" if guess else ""
    return f"unknown field {_shown(name)}{suggestion or '.'} Allowed: {', '.join(allowed)}"


def _not_one_of(value: Any, allowed: list[Any]) -> str:
    if len(allowed) <= 8:
        return f"{_shown(value)} is not allowed; use one of {', '.join(repr(a) for a in allowed)}"
    guess = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
    suggestion = f"did you mean {guess[0]!r}? " if guess else ""
    return f"{_shown(value)} is not allowed; {suggestion}{len(allowed)} values are allowed, e.g. " + ", ".join(
        repr(a) for a in allowed[:5]
    )


def _first_sentence(text: str) -> str:
    sentence = text.split(". ")[0].rstrip(".")
    return sentence[:1].lower() + sentence[1:] if sentence else ""
