"""Where an unset template field's value comes from: a "because" line of an inherited value reads
`(inherited 1GiB from profiles.medium) → 2GiB`, not `(unset) → 2GiB`.

Read off the stack as written (before inheritance), in the order resolution applies the layers
(sandstack.spec.resolve, sandstack.spec.inherit): the template's own value, its `limits` profile, the templates it
`extends` (each whole, as inheritance takes them), then `defaults` (and the defaults' profile), then sandstack's
built-in value.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, TypeVar

from sandstack.spec.models import BUILTIN_LIMITS, Stack
from sandstack.spec.resolve import BUILTIN_FIELDS, BUILTIN_RUNTIME, BUILTIN_USER, ResolvedStack

# The built-in values that do not depend on another field (the built-in /tmp and /dev/shm follow the memory).
BUILTIN = {**{("limits", k): v for k, v in BUILTIN_LIMITS.items()},
           **{k: v for k, v in BUILTIN_FIELDS.items() if k not in (("filesystem", "writable"),
                                                                     ("filesystem", "shm_size"))},
           ("user",): BUILTIN_USER, ("runtime",): BUILTIN_RUNTIME}


def _get(node: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        if node is None:
            return None
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _in_limits(raw: dict, limits: Any, field: str, at: str) -> tuple[Any, str] | None:
    """A limits field in a `limits` layer: a profile's name, or fields over an optional profile."""
    if isinstance(limits, str):
        value = _get(raw, ("profiles", limits, field))
        return (value, f"profiles.{limits}.{field}") if value is not None else None
    if isinstance(limits, dict):
        if limits.get(field) is not None:
            return limits[field], f"{at}.{field}"
        if limits.get("profile"):
            return _in_limits(raw, limits["profile"], field, at)
    return None


def origin(written: Stack, path: str) -> tuple[Any, str] | None:
    """(value, where it is written) of the template field at `path` when the template itself leaves it unset;
    None for a path that is not a template's field, or where no layer sets it and no built-in is known."""
    parts = tuple(path.split("."))
    if len(parts) < 3 or parts[0] != "templates":
        return None
    raw = written.model_dump(mode="json", exclude_unset=True)
    rest = parts[2:]
    name, seen = parts[1], set()
    while name is not None and name not in seen:  # the template, then each template it extends
        seen.add(name)
        template = _get(raw, ("templates", name)) or {}
        if rest[0] == "limits" and len(rest) == 2:
            found = _in_limits(raw, template.get("limits"), rest[1], f"templates.{name}.limits")
            if found is not None:
                return found
            if "limits" in template:  # taken whole: what it does not set comes from defaults
                break
        else:
            value = _get(template, rest)
            if value is not None:
                return value, f"templates.{name}.{'.'.join(rest)}"
        name = template.get("extends")
    if rest[0] == "limits" and len(rest) == 2:
        found = _in_limits(raw, _get(raw, ("defaults", "limits")), rest[1], "defaults.limits")
    else:
        value = _get(raw, ("defaults", *rest))
        found = (value, f"defaults.{'.'.join(rest)}") if value is not None else None
    if found is not None:
        return found
    if tuple(rest) in BUILTIN:
        return BUILTIN[tuple(rest)], "the built-in default"
    return None


Change = TypeVar("Change")


def with_origin(change: Change, old: ResolvedStack, new: ResolvedStack) -> Change:
    """A spec change (sandstack.review.diff.FieldChange) of a template field unset on one side, with the value it
    inherited there and where from (its `inherited`)."""
    a, b = change.old, change.new  # type: ignore[attr-defined]
    if (a is None) == (b is None) or "(declared)" in (a, b):
        return change
    return replace(change, inherited=(origin(old.written, change.path) if a is None else None,  # type: ignore
                                      origin(new.written, change.path) if b is None else None))  # type: ignore
