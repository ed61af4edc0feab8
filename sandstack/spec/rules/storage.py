"""What a host's runtime keeps on the host's disk: the pools' snapshots and hibernation copies, each pool bounded by
its `session.snapshot_storage`."""

from __future__ import annotations

from typing import Iterator

from sandstack.spec.errors import Diagnostic
from sandstack.spec.models import SessionPolicy
from sandstack.spec.rules.context import Context, placements, rule
from sandstack.spec.units import format_size


@rule("snapshot-storage")
def snapshot_storage_fits_the_host(ctx: Context) -> Iterator[Diagnostic]:
    """The pools' `snapshot_storage` on a host with a runtime, summed, fits its `capacity.disk`: it is disk the
    runtime may fill on the host (its state volume), not a limit Docker overcommits. Each pool was bounded on its
    own, so 13 pools of 8GiB validated on a 40GiB host."""
    need: dict[str, list[tuple[str, int]]] = {}
    for pool, template_name, host, sandboxes in placements(ctx):
        if ctx.stack.hosts[host].runtime is None or sandboxes == 0:
            continue  # snapshots and hibernation are the runtime's: no runtime, nothing kept
        template = ctx.stack.templates[template_name]
        session = template.session or ctx.stack.defaults.session or SessionPolicy()
        need.setdefault(host, []).append((pool, session.snapshot_storage))
    for host, pools in need.items():
        total, disk = sum(size for _, size in pools), ctx.stack.hosts[host].capacity.disk
        if total > disk:
            parts = ", ".join(f"{pool}: {format_size(size)}" for pool, size in pools)
            yield ctx.error(("hosts", host, "capacity", "disk"), f"the runtime on host {host!r} may keep "
                            f"{format_size(total)} of snapshots and hibernation copies ({parts}: each pool's "
                            f"`session.snapshot_storage`) but its capacity.disk is {format_size(disk)}: lower "
                            "`snapshot_storage` or raise the capacity", "snapshot-storage")


# This module's rules (the registry, sandstack.spec.rules.RULES, lists each module).
RULES = (snapshot_storage_fits_the_host,)
