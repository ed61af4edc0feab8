"""Writable paths: bounded, distinct, outside sandstack's mounts, within `limits.disk`, and leaving memory for processes (tmpfs files are memory)."""

from __future__ import annotations

from typing import Iterator

from sandstack.spec.contract import RUN_DIR, SECRETS_DIR
from sandstack.spec.errors import Diagnostic, JsonPath
from sandstack.spec.models import Template
from sandstack.spec.models.limits import process_headroom
from sandstack.spec.resolve import UnknownProfile, effective_limits, effective_writable, inherited
from sandstack.spec.rules.context import Context, placements, rule, templates
from sandstack.spec.rules.memory import MIN_MEMORY
from sandstack.spec.units import MIB, format_size


# Paths sandstack mounts into every sandbox; a writable path there would hide or break the mount.
RESERVED_PATHS = {
    SECRETS_DIR: "where secret files are mounted read-only",
    RUN_DIR: "where sandstack mounts the host guard's state",
}


@rule("disk-enforced")
def disk_limit_enforceable(ctx: Context) -> Iterator[Diagnostic]:
    for path, template in templates(ctx):
        try:
            limits = effective_limits(ctx.stack, template)
        except UnknownProfile:
            continue
        # The same writable paths resolution gives the sandbox: an explicit `[]` is none, not '/tmp'.
        total = sum(w.size for w in effective_writable(ctx.stack, template))
        if total > limits.disk:
            yield ctx.error(path + ("filesystem",), f"writable paths add up to {format_size(total)}, more than "
                            f"`limits.disk` {format_size(limits.disk)}", "disk-enforced")
        if not inherited(ctx.stack, template, "filesystem", "read_only_root"):
            for pool, template_name, host, _ in placements(ctx):
                if template_name == path[1] and not ctx.stack.hosts[host].storage_quota:
                    yield ctx.error(path + ("filesystem", "read_only_root"),
                                    f"a writable root cannot be held to `limits.disk` on host {host!r} (pool "
                                    f"{pool!r}): it has no `storage_quota`; keep the root read-only and declare "
                                    "writable paths", "disk-enforced")


@rule("writable-memory")
def tmpfs_leaves_memory_for_processes(ctx: Context) -> Iterator[Diagnostic]:
    """tmpfs writable paths and /dev/shm are charged to the sandbox's memory. If full ones can take all of
    `limits.memory`, a sandbox can wedge itself: each new process (an exec, a restarted command) is OOM-killed
    and nothing inside can run to free the space. Sizes are the resolved ones (built-ins, defaults, profiles)."""
    for path, template in templates(ctx):
        try:
            memory = effective_limits(ctx.stack, template).memory
        except UnknownProfile:
            continue
        if memory < MIN_MEMORY or memory % MIB:
            continue  # reported by memory-unit
        writable = [w for w in effective_writable(ctx.stack, template) if w.type == "tmpfs"]
        shm = inherited(ctx.stack, template, "filesystem", "shm_size")
        total = sum(w.size for w in writable) + shm
        headroom = process_headroom(memory)
        if total + headroom <= memory:
            continue
        parts = ", ".join([*(f"{w.path} {format_size(w.size)}" for w in writable), f"/dev/shm {format_size(shm)}"])
        yield ctx.error(_writable_memory_place(path, template), f"writable paths and /dev/shm can hold "
                        f"{format_size(total)} ({parts}), leaving less than {format_size(headroom)} of "
                        f"`limits.memory` {format_size(memory)} for processes: tmpfs files are memory, so full paths "
                        "would get the sandbox's next process OOM-killed; shrink the paths or "
                        "`filesystem.shm_size`, or raise `limits.memory` to at least "
                        f"{format_size(total + headroom)}", "writable-memory")


def _writable_memory_place(path: JsonPath, template: Template) -> JsonPath:
    """The template's own `filesystem`, else its own `limits` (at `memory` if it sets one), else the template."""
    if template.filesystem is None and template.limits is not None:
        if getattr(template.limits, "memory", None) is not None:
            return path + ("limits", "memory")
        return path + ("limits",)
    return path + ("filesystem",)


@rule("writable-size")
def writable_paths_bounded(ctx: Context) -> Iterator[Diagnostic]:
    """tmpfs reads `size=0` as no limit at all: such a path would be bounded by nothing but memory."""
    owners = [(("defaults",), ctx.stack.defaults.filesystem)] + [(p, t.filesystem) for p, t in templates(ctx)]
    for path, fs in owners:
        for i, w in enumerate((fs.writable or []) if fs else []):
            if w.size == 0:
                yield ctx.error(path + ("filesystem", "writable", i, "size"), f"size 0 would leave {w.path!r} "
                                "unbounded (tmpfs reads 0 as no limit): give it a size, e.g. '64MiB', or remove "
                                "the path", "writable-size")


@rule("unique-paths")
def sandbox_paths_distinct(ctx: Context) -> Iterator[Diagnostic]:
    owners = [(("defaults",), ctx.stack.defaults.filesystem)] + [(p, t.filesystem) for p, t in templates(ctx)]
    for path, fs in owners:
        declared: set[str] = set()
        for i, w in enumerate((fs.writable or []) if fs else []):
            where = path + ("filesystem", "writable", i, "path")
            reserved = next((r for r in RESERVED_PATHS if w.path == r or w.path.startswith(r + "/")), None)
            if reserved is not None:
                yield ctx.error(where, f"{w.path!r} is inside {reserved!r}, {RESERVED_PATHS[reserved]}", "unique-paths")
            elif w.path in declared:
                yield ctx.error(where, f"{w.path!r} is declared twice", "unique-paths")
            declared.add(w.path)
    for path, template in templates(ctx):
        seen: set[str] = set()
        for i, s in enumerate(template.secrets):
            if s.path in seen:
                yield ctx.error(path + ("secrets", i, "path"), f"{s.path!r} is declared twice", "unique-paths")
            seen.add(s.path)


# This module's rules, in the order they run (the registry, sandstack.spec.rules.RULES, lists each module).
RULES = (disk_limit_enforceable, tmpfs_leaves_memory_for_processes, writable_paths_bounded, sandbox_paths_distinct,)
