"""Where a pool runs: its share of one host (the host's plan and the runtime's both read it)."""

from __future__ import annotations

from dataclasses import dataclass

from sandstack.spec.resolve import ResolvedStack, ResolvedTemplate


@dataclass(frozen=True)
class Placement:
    """A pool's share of one host: which template, how many sandboxes."""

    pool: str
    template: ResolvedTemplate
    replicas: int
    # Sandboxes at most (the pool's `max`, never below `replicas`; 0 given: `replicas`): the warm ones, then the
    # on-demand ones. The guard holds a place for each (its name, limits and workspaces) before any exists.
    ceiling: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "ceiling", max(self.ceiling, self.replicas))


def placements_by_host(spec: ResolvedStack) -> dict[str, list[Placement]]:
    """Each host's pools, in spec order; hosts without pools still get their host resources."""
    out: dict[str, list[Placement]] = {host: [] for host in spec.hosts}
    for pool_name, pool in spec.pools.items():
        for host in dict.fromkeys(pool.hosts):
            out[host].append(Placement(pool_name, spec.templates[pool.template], pool.replicas, pool.ceiling))
    return out
