"""Template inheritance: `extends` and the defaults' `base_image` and `snapshot`, applied once, after the models
validate and before the semantic rules run, so that every later layer (rules, resolution, plan) sees each
template whole. Cycles and unknown parents are reported here, located, before anything is merged."""

from __future__ import annotations

from typing import Iterator

from sandstack.spec.errors import Diagnostic
from sandstack.spec.loader import Document
from sandstack.spec.models import Snapshot, Stack, Template

# Blocks merged field by field from the parent (as from `defaults`); every other field is taken whole.
MERGED_BLOCKS = ("lifecycle", "filesystem", "security")
# Fields that say one thing two ways: a template that sets one inherits neither (its own `network` replaces the
# parent's profiles, its own profiles the parent's `network`).
ALTERNATIVES = {"network": "network_profiles", "network_profiles": "network"}


def extends_diagnostics(doc: Document, stack: Stack) -> Iterator[Diagnostic]:
    for name, template in stack.templates.items():
        if template.extends is None:
            continue
        where = ("templates", name, "extends")
        if template.extends not in stack.templates:
            yield doc.diagnostic(where, f"unknown template {template.extends!r}; templates: "
                                 f"{', '.join(sorted(stack.templates))}", "ref-extends")
            continue
        chain, current = [name], template.extends
        while current is not None and current not in chain and current in stack.templates:
            chain.append(current)
            current = stack.templates[current].extends
        if current == name:
            yield doc.diagnostic(where, "`extends` goes round in a circle: " + " → ".join(chain + [name]),
                                 "ref-extends")


def _merge_block(parent, child):
    """A field-by-field block: the child's set fields over the parent's (validated models, not re-parsed)."""
    return parent.model_copy(update={k: getattr(child, k) for k in child.model_fields_set})


def _merged(stack: Stack, name: str) -> Template:
    template = stack.templates[name]
    if template.extends is None:
        return template
    parent = _merged(stack, template.extends)
    values, fields_set = {}, set(template.model_fields_set)
    for field_name in Template.model_fields:
        own_set = field_name in template.model_fields_set
        parent_set = field_name in parent.model_fields_set and field_name != "description"
        own, inherited = getattr(template, field_name), getattr(parent, field_name)
        if own_set and parent_set and field_name in MERGED_BLOCKS and own is not None and inherited is not None:
            values[field_name] = _merge_block(inherited, own)
        elif own_set and parent_set and field_name == "env":
            values[field_name] = {**inherited, **own}
        elif not own_set and parent_set and ALTERNATIVES.get(field_name) not in template.model_fields_set:
            values[field_name] = inherited
            fields_set.add(field_name)
        else:
            values[field_name] = own
    return Template.model_construct(_fields_set=fields_set, **values)


def expand(stack: Stack) -> Stack:
    """The stack with every template whole: its `extends` chain merged in, then the defaults' base image and
    snapshot where it has none. Assumes extends_diagnostics found nothing."""
    defaults = stack.defaults
    templates = {}
    for name in stack.templates:
        merged = _merged(stack, name)
        update = {}
        if merged.base_image is None and defaults.base_image is not None:
            update["base_image"] = defaults.base_image
        if merged.snapshot is None:
            update["snapshot"] = defaults.snapshot or Snapshot()
        templates[name] = merged.model_copy(update=update) if update else merged
    return stack.model_copy(update={"templates": templates})
