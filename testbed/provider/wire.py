"""A plan node's inputs as pulumi-docker receives them on the wire: Python argument names in camelCase, except the
keys of map-valued inputs (labels, option names, paths), which are the user's own. The differential test compares
registrations with these (tests/differential/compare.py); the engine coverage reads which fields a plan sets
(testbed/harness/coverage.py)."""

from __future__ import annotations

from typing import Any, Callable

# Inputs whose values are maps with keys of their own (labels, paths, option names), not object fields.
MAPS = {"options", "tmpfs", "storage_opts", "log_opts", "driver_opts", "triggers", "labels", "build_args"}


def camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def to_wire(value: Any, leaf: Callable[[Any], Any], in_map: bool = False) -> Any:
    """`value` with object keys in camelCase; `leaf` turns each other value (a Ref, a Secret, a plain value) into
    what the wire carries."""
    if isinstance(value, dict):
        if in_map:
            return {k: to_wire(v, leaf) for k, v in value.items()}
        return {camel(k): to_wire(v, leaf, k in MAPS and isinstance(v, dict)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_wire(v, leaf) for v in value]
    return leaf(value)
