"""Every field of the spec models by its path ('templates.*.ports[].port'), walked from a model.

A map's values add '.*' to the path, a list's items '[]'. The change table, the reference and the
change-matrix test all walk the models the same way. A field declared `whole` (sandstack.spec.models.base.field) is
walked as one field: a change anywhere inside it is its own (a template's network profiles: each profile is a
`NetworkPolicy`, whose fields declare their effects for the template's `network`, not for a profile).
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo


def _models_in(annotation: Any, suffix: str = "") -> list[tuple[str, type[BaseModel]]]:
    """(path suffix, model) of each model inside a type."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(suffix, annotation)]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _models_in(args[0], suffix)
    if origin is dict:
        return _models_in(args[1], suffix + ".*")
    if origin is list:
        return _models_in(args[0], suffix + "[]")
    return [found for arg in args for found in _models_in(arg, suffix)]


def model_fields(model: type[BaseModel], prefix: str = "") -> dict[str, FieldInfo]:
    """Every field path under `model` → its pydantic FieldInfo."""
    out: dict[str, FieldInfo] = {}
    for name, info in model.model_fields.items():
        path = prefix + name
        out[path] = info
        if getattr(info.json_schema_extra, "whole", False):
            continue
        for suffix, sub in _models_in(info.annotation):
            out.update(model_fields(sub, f"{path}{suffix}."))
    return out
