"""A pool's size classes (`pools.*.sizes`, docs/design/sizes.md): each one a set of limits a claim may name, which
the runtime applies at claim time. Capacity (host-capacity) counts the largest class at the ceiling; these rules hold
each class to what one sandbox of the pool can be given."""

from __future__ import annotations

from typing import Iterator

from sandstack.spec.errors import Diagnostic
from sandstack.spec.models.limits import process_headroom
from sandstack.spec.resolve import SIZE_FIELDS, UnknownProfile, effective_writable, inherited, pool_sizes
from sandstack.spec.rules.context import Context, hosts_without_runtime, rule, written
from sandstack.spec.rules.memory import MIN_MEMORY
from sandstack.spec.units import MIB, format_cpus, format_size

WORDS = {"cpus": ("{} CPUs", format_cpus), "memory": ("{} of memory", format_size), "disk": ("{} of disk", format_size)}


def _classes(ctx: Context):
    """(pool name, pool, template name, the pool's own limits, {class: its limits}) for every pool with classes
    whose template and profile exist (rules ref-* report the others)."""
    for name, pool in ctx.stack.pools.items():
        if not pool.sizes or pool.template not in ctx.stack.templates:
            continue
        try:
            limits = ctx.limits(pool.template)
        except UnknownProfile:
            continue
        yield name, pool, pool.template, limits, pool_sizes(pool, limits)


@rule("size-declared")
def sizes_declared(ctx: Context) -> Iterator[Diagnostic]:
    """An empty map declares nothing a claim could name; a class that sets nothing is the pool's own limits, which a
    claim naming no class already gets."""
    for name, pool in ctx.stack.pools.items():
        if pool.sizes is None:
            continue
        if not pool.sizes:
            yield ctx.error(("pools", name, "sizes"), f"pool {name!r} declares an empty map of size classes: give "
                            "at least one (e.g. `large: {cpus: 2, memory: 4GiB}`), or leave `sizes` out", "size-declared")
        for cls, spec in pool.sizes.items():
            if all(getattr(spec, k) is None for k in SIZE_FIELDS):
                yield ctx.error(("pools", name, "sizes", cls), f"size class {cls!r} of pool {name!r} sets no limit, "
                                "so it is the pool's own limits, which a claim naming no class gets: set at least one "
                                f"of {', '.join(SIZE_FIELDS)}", "size-declared")


@rule("size-runtime")
def sizes_need_a_runtime(ctx: Context) -> Iterator[Diagnostic]:
    """Only the runtime applies a class (at claim time): every host of a pool with classes runs one."""
    for name, pool in ctx.stack.pools.items():
        if not pool.sizes:
            continue
        for i, host in hosts_without_runtime(ctx, name):
            yield ctx.error(("pools", name, "hosts", i), f"pool {name!r} declares size classes, which the "
                            f"runtime applies at claim time, but host {host!r} declares no runtime "
                            f"(`hosts.{host}.runtime`)", "size-runtime")


@rule("size-host")
def class_fits_each_host(ctx: Context) -> Iterator[Diagnostic]:
    """One sandbox of a class cannot be given more CPUs, memory or disk than a host of its pool has at all (Docker
    refuses more CPUs than the host has; overcommit shares a host among sandboxes, it does not enlarge one)."""
    for name, pool, _, _, sizes in _classes(ctx):
        for cls, limits in sizes.items():
            for dim, (words, fmt) in WORDS.items():
                if getattr(pool.sizes[cls], dim) is None:
                    continue
                for host in dict.fromkeys(pool.hosts):
                    spec = ctx.stack.hosts.get(host)
                    if spec is None or getattr(limits, dim) <= getattr(spec.capacity, dim):
                        continue
                    yield ctx.error(("pools", name, "sizes", cls, dim),
                                    f"size class {cls!r} of pool {name!r} gives one sandbox "
                                    f"{words.format(fmt(getattr(limits, dim)))} but host {host!r} has "
                                    f"{fmt(getattr(spec.capacity, dim))} "
                                    f"(`hosts.{host}.capacity.{dim}`): no sandbox can be given more than its host has",
                                    "size-host")


@rule("size-memory")
def class_memory_holds_the_template(ctx: Context) -> Iterator[Diagnostic]:
    """A class's memory holds the template's tmpfs paths, /dev/shm and room for processes, as `limits.memory` must
    (rule writable-memory), and is a size Docker can enforce (rule memory-unit)."""
    for name, pool, template, _, sizes in _classes(ctx):
        t = ctx.stack.templates[template]
        tmpfs = sum(w.size for w in effective_writable(ctx.stack, t) if w.type == "tmpfs")
        need = tmpfs + inherited(ctx.stack, t, "filesystem", "shm_size")
        for cls, limits in sizes.items():
            memory = pool.sizes[cls].memory
            if memory is None:
                continue
            where = ("pools", name, "sizes", cls, "memory")
            if memory < MIN_MEMORY or memory % MIB:
                yield ctx.error(where, f"{written(ctx, where)} cannot be enforced exactly: Docker limits memory in "
                                "whole MiB, at least 6MiB", "size-memory")
            elif need + process_headroom(memory) > memory:
                yield ctx.error(where, f"size class {cls!r} of pool {name!r} has {format_size(memory)} of memory but "
                                f"template {template!r}'s tmpfs paths and /dev/shm can hold {format_size(need)}, "
                                f"leaving less than {format_size(process_headroom(memory))} for processes: give it at "
                                f"least {format_size(need + process_headroom(memory))}", "size-memory")


@rule("size-disk")
def class_disk_holds_the_template(ctx: Context) -> Iterator[Diagnostic]:
    """A class's disk holds the template's writable paths (as `limits.disk` must, rule disk-enforced); one that
    differs from the pool's own disk cannot be given to a running sandbox, so only an on-demand one serves it."""
    for name, pool, template, limits, sizes in _classes(ctx):
        t = ctx.stack.templates[template]
        total = sum(w.size for w in effective_writable(ctx.stack, t))
        for cls, size in sizes.items():
            disk = pool.sizes[cls].disk
            if disk is None:
                continue
            where = ("pools", name, "sizes", cls, "disk")
            if total > disk:
                yield ctx.error(where, f"size class {cls!r} of pool {name!r} has {format_size(disk)} of disk but "
                                f"template {template!r}'s writable paths add up to {format_size(total)}", "size-disk")
            elif disk != limits.disk and pool.ceiling <= pool.replicas:
                yield ctx.error(where, f"size class {cls!r} of pool {name!r} has {format_size(disk)} of disk, not the "
                                f"pool's {format_size(limits.disk)}: a running sandbox's disk cannot change, so only a "
                                "sandbox created on demand for the claim can have it, and the pool has no ceiling "
                                "above its warm sandboxes: set `max` above `replicas`, or leave the class's disk out",
                                "size-disk")


RULES = (sizes_declared, sizes_need_a_runtime, class_fits_each_host, class_memory_holds_the_template,
         class_disk_holds_the_template)
