"""What every rule reads (`Context`), how it is marked (`@rule`), and the walks several rules share."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from sandstack.spec.errors import Diagnostic, JsonPath
from sandstack.spec.loader import Document
from sandstack.spec.models import NetworkPolicy, Stack, Template
from sandstack.spec.resolve import EffectiveLimits, effective_limits


@dataclass
class Context:
    doc: Document
    stack: Stack
    source: Path
    _limits: dict[str, EffectiveLimits] = field(default_factory=dict, repr=False, compare=False)

    def limits(self, template: str) -> EffectiveLimits:
        """The template's effective limits (resolve.effective_limits), computed once per check: the capacity rules
        ask for them at every placement (pool × host). Raises UnknownProfile as effective_limits does."""
        if template not in self._limits:
            self._limits[template] = effective_limits(self.stack, self.stack.templates[template])
        return self._limits[template]

    def error(self, path: JsonPath, message: str, rule: str, *, key: bool = False) -> Diagnostic:
        return self.doc.diagnostic(path, message, rule, key=key)


Rule = Callable[[Context], Iterator[Diagnostic]]


def rule(rule_id: str) -> Callable[[Rule], Rule]:
    """Names a rule with its stable id; the registry (sandstack.spec.rules.RULES) lists it by its module."""
    def mark(fn: Rule) -> Rule:
        fn.rule_id = rule_id  # type: ignore[attr-defined]
        return fn

    return mark


def templates(ctx: Context) -> Iterator[tuple[JsonPath, Template]]:
    for name, template in ctx.stack.templates.items():
        yield ("templates", name), template


def placements(ctx: Context) -> Iterator[tuple[str, str, str, int]]:
    """(pool, template, host, sandboxes) for every pool whose references exist: its places (`max`, and
    `max_hibernated` more), not only its warm `replicas`, so that what the runtime may create on demand fits too.
    What only a running sandbox holds (CPUs, memory) is counted at the running ceiling instead (`running`)."""
    for pool_name, pool in ctx.stack.pools.items():
        if pool.template not in ctx.stack.templates:
            continue
        for host in dict.fromkeys(pool.hosts):
            if host in ctx.stack.hosts:
                yield pool_name, pool.template, host, pool.places


def running(ctx: Context, pool: str, places: int) -> int:
    """Of a pool's `places` on a host, the sandboxes that may run at once: its ceiling (`max`), which a hibernated
    session does not count toward when the pool declares `max_hibernated`."""
    return min(ctx.stack.pools[pool].ceiling, places)


def hosts_without_runtime(ctx: Context, pool: str) -> Iterator[tuple[int, str]]:
    """(index in the pool's `hosts`, host) of each declared host of `pool` that runs no runtime: what only a runtime
    does (hibernation, network profiles, size classes, a URL's session check) never happens there."""
    for i, host in enumerate(ctx.stack.pools[pool].hosts):
        spec = ctx.stack.hosts.get(host)
        if spec is not None and spec.runtime is None:
            yield i, host


def policies(ctx: Context) -> Iterator[tuple[JsonPath, NetworkPolicy]]:
    """Every network policy written in the file: the defaults', each template's own and each of its profiles."""
    if ctx.stack.defaults.network is not None:
        yield ("defaults", "network"), ctx.stack.defaults.network
    for path, template in templates(ctx):
        if template.network is not None:
            yield path + ("network",), template.network
        if template.network_profiles is not None:
            for name, policy in template.network_profiles.profiles.items():
                yield path + ("network_profiles", "profiles", name), policy


def written(ctx: Context, path: JsonPath) -> object:
    """The value at `path` as the file wrote it ('2GB'), before the models turned it into bytes."""
    node = ctx.doc.data
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
    return node
