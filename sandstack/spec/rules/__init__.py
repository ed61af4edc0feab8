"""Semantic rules: what a schema cannot say. One small named function per rule, each with a test.

Every rule yields located diagnostics and never raises; a rule that depends on a reference another
rule checks (a pool's template, a profile) skips what is broken rather than reporting it twice.

The registry is `RULES` below: each module of this package lists its rules (its `RULES`), and `MODULES`
lists the modules. A new rule goes into the module of its subject and into that module's list.
"""

from __future__ import annotations

from sandstack.spec.errors import Diagnostic
from sandstack.spec.rules import (
    capacity,
    disk,
    egress,
    filesystem,
    images,
    ingress,
    memory,
    ondemand,
    platform,
    ports,
    privileges,
    profiles,
    references,
    runtime,
    sizes,
    storage,
)
from sandstack.spec.rules.context import Context, Rule

MODULES = (references, egress, profiles, images, ports, capacity, filesystem, privileges, memory, disk, ingress, runtime, ondemand,
           storage, platform, sizes)
# rule id → rule, in the order they run (their diagnostics are sorted by place afterwards).
RULES: dict[str, Rule] = {fn.rule_id: fn for module in MODULES for fn in module.RULES}  # type: ignore[attr-defined]


def run_rules(ctx: Context) -> list[Diagnostic]:
    return [d for fn in RULES.values() for d in fn(ctx)]


__all__ = ["MODULES", "RULES", "Context", "Rule", "run_rules"]
