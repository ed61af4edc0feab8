"""Where a pool runs: its share of one host (the host's plan and the runtime's both read it)."""

from __future__ import annotations

from dataclasses import dataclass

from sandstack.spec.resolve import EffectiveLimits, ResolvedStack, ResolvedTemplate, pool_sizes


@dataclass(frozen=True)
class Placement:
    """A pool's share of one host: which template, how many sandboxes."""

    pool: str
    template: ResolvedTemplate
    replicas: int
    # Sandboxes at most (the pool's `max`, never below `replicas`; 0 given: `replicas`): the warm ones, then the
    # on-demand ones. The guard holds a place for each (its name, limits and workspaces) before any exists.
    ceiling: int = 0
    # Its size classes (`sizes`), each as the limits a claim naming it gets, in spec order; () when it has none.
    sizes: tuple[tuple[str, EffectiveLimits], ...] = ()
    # Sessions hibernated in on-demand places at most (`max_hibernated`), each in a place of its own past the
    # ceiling, which then counts only the sandboxes running; None: a hibernated session holds its place under it.
    hibernated: int | None = None

    @property
    def places(self) -> int:
        """Sandbox names: the ceiling's, and one per hibernated session allowed (the guard holds each)."""
        return self.ceiling + (self.hibernated or 0)

    @property
    def largest_pids(self) -> int:
        """The most processes a sandbox of the pool may be given: the guard holds each one's cgroup parent at it, and
        the runtime sets a claim's own limit under it (sandstack.runtime.sizes)."""
        return max([self.template.limits.pids, *(limits.pids for _, limits in self.sizes)])

    def __post_init__(self) -> None:
        object.__setattr__(self, "ceiling", max(self.ceiling, self.replicas))


def placements_by_host(spec: ResolvedStack) -> dict[str, list[Placement]]:
    """Each host's pools, in spec order; hosts without pools still get their host resources."""
    out: dict[str, list[Placement]] = {host: [] for host in spec.hosts}
    for pool_name, pool in spec.pools.items():
        for host in dict.fromkeys(pool.hosts):
            template = spec.templates[pool.template]
            out[host].append(Placement(pool_name, template, pool.replicas, pool.ceiling,
                                       tuple(pool_sizes(pool, template.limits).items()), pool.max_hibernated))
    return out
