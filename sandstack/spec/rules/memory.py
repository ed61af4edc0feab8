"""Memory and /dev/shm sizes Docker can enforce exactly: whole MiB, above its minimums."""

from __future__ import annotations

from typing import Iterator

from sandstack.spec.errors import Diagnostic, JsonPath
from sandstack.spec.rules.context import Context, rule, templates, written
from sandstack.spec.units import MIB, decimal_size_advice, format_size


MIN_MEMORY = 6 * MIB  # Docker refuses a smaller memory limit


@rule("memory-unit")
def memory_in_whole_mebibytes(ctx: Context) -> Iterator[Diagnostic]:
    owners: list[tuple[JsonPath, object]] = [(("profiles", n), p) for n, p in ctx.stack.profiles.items()]
    owners.append((("defaults", "limits"), ctx.stack.defaults.limits))
    owners += [(p + ("limits",), t.limits) for p, t in templates(ctx)]
    for path, limits in owners:
        memory = getattr(limits, "memory", None)
        if memory is None:
            continue
        if memory < MIN_MEMORY or memory % MIB:
            yield ctx.error(path + ("memory",), decimal_size_advice(
                written(ctx, path + ("memory",)), memory, MIN_MEMORY, "Docker limits memory in whole MiB") or
                f"{format_size(memory)} cannot be enforced exactly: Docker limits memory in whole MiB, at least 6MiB",
                "memory-unit")
    # /dev/shm is sized in whole MiB too, and 0 would give Docker's default (64MiB) instead of none.
    filesystems = [(("defaults", "filesystem"), ctx.stack.defaults.filesystem)]
    filesystems += [(p + ("filesystem",), t.filesystem) for p, t in templates(ctx)]
    for path, fs in filesystems:
        shm = fs.shm_size if fs is not None else None
        if shm is not None and (shm < MIB or shm % MIB):
            yield ctx.error(path + ("shm_size",), decimal_size_advice(
                written(ctx, path + ("shm_size",)), shm, MIB, "Docker sizes /dev/shm in whole MiB") or
                f"{format_size(shm)} cannot be enforced exactly: Docker sizes /dev/shm in whole MiB, at least 1MiB",
                "memory-unit")


# This module's rules, in the order they run (the registry, sandstack.spec.rules.RULES, lists each module).
RULES = (memory_in_whole_mebibytes,)
