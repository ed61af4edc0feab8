"""Rules for disk workspaces (`filesystem.writable[].type: disk`): sizes the guard can make and a host that
can hold them."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterator

from sandstack.spec.errors import Diagnostic
from sandstack.spec.models.templates import MIN_DISK_WORKSPACE
from sandstack.spec.resolve import effective_writable
from sandstack.spec.rules.context import Context, placements, rule, templates
from sandstack.spec.units import MIB, format_size


@rule("disk-workspace")
def disk_workspace_sizes(ctx: Context) -> Iterator[Diagnostic]:
    """A disk workspace is an ext4 filesystem of exactly its size, named after it in whole MiB."""
    owners = [(("defaults",), ctx.stack.defaults.filesystem)] + [(p, t.filesystem) for p, t in templates(ctx)]
    for path, fs in owners:
        for i, w in enumerate((fs.writable or []) if fs else []):
            where = path + ("filesystem", "writable", i)
            if w.type == "disk" and w.size < MIN_DISK_WORKSPACE:
                yield ctx.error(where + ("size",), f"a disk workspace of {format_size(w.size)} at {w.path!r} is "
                                f"too small to hold anything after ext4's own metadata: at least "
                                f"{format_size(MIN_DISK_WORKSPACE)}", "disk-workspace")
            elif w.type == "disk" and w.size % MIB:
                yield ctx.error(where + ("size",), f"a disk workspace's size is in whole MiB; {w.size} bytes at "
                                f"{w.path!r} is not, e.g. use {format_size(w.size // MIB * MIB)}", "disk-workspace")
            if w.seed and w.type != "disk":
                yield ctx.error(where + ("seed",), f"`seed` fills a new disk workspace from the image; {w.path!r} "
                                "is a tmpfs: set `type: disk` or remove `seed`", "disk-workspace")


@rule("disk-workspace-host")
def disk_workspaces_fit_their_host(ctx: Context) -> Iterator[Diagnostic]:
    """Only a host that declares `disk_workspaces` can enforce their sizes, and they must fit what it sets aside
    (their files are made at full size, so what the rule admits the host can really give)."""
    need: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
    for pool, template_name, host, replicas in placements(ctx):
        disk = [w for w in effective_writable(ctx.stack, ctx.stack.templates[template_name]) if w.type == "disk"]
        if not disk:
            continue
        if ctx.stack.hosts[host].disk_workspaces is None:
            paths = ", ".join(w.path for w in disk)
            yield ctx.error(("pools", pool, "hosts"), f"pool {pool!r} has disk workspaces (template "
                            f"{template_name!r}: {paths}) but host {host!r} declares no `disk_workspaces`, so their "
                            f"sizes could not be enforced there: declare `hosts.{host}.disk_workspaces` (the disk it "
                            "sets aside for them) or make the paths tmpfs", "disk-workspace-host")
            continue
        need[host].append((pool, replicas, sum(w.size for w in disk)))
    for host, pools in need.items():
        total, capacity = sum(r * size for _, r, size in pools), ctx.stack.hosts[host].disk_workspaces
        if total > capacity:
            parts = ", ".join(f"pool {pool!r} {r} × {format_size(size)}" for pool, r, size in pools)
            yield ctx.error(("hosts", host, "disk_workspaces"), f"disk workspaces on host {host!r} add up to "
                            f"{format_size(total)} ({parts}), more than its `disk_workspaces` "
                            f"{format_size(capacity)}", "disk-workspace-host")


# This module's rules, in the order they run (the registry, sandstack.spec.rules.RULES, lists each module).
RULES = (disk_workspace_sizes, disk_workspaces_fit_their_host,)
