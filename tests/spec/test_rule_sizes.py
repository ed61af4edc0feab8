"""A pool's size classes (`pools.*.sizes`; sandstack.spec.rules.sizes and host-capacity): each class is held to what
one sandbox of the pool can be given, and capacity counts the largest class at the ceiling."""

from __future__ import annotations

from tests.spec.helpers import edit, fixture_text, lines

BASE = fixture_text("rules.yaml")
RUNTIME = ("      disk: 20GiB\n", "      disk: 20GiB\n    runtime:\n      token: {secret: runtimeToken}\n")


def stack(sizes: str, *pairs: tuple[str, str], runtime: bool = True) -> str:
    text = edit(BASE, "    replicas: 1\n", "    replicas: 1\n" + sizes)
    for old, new in ((RUNTIME,) if runtime else ()) + pairs:
        text = edit(text, old, new)
    return text


def errors(diagnostics, prefix: str = "size") -> list[str]:
    return [line for d, line in zip(diagnostics, lines(diagnostics)) if d.rule.startswith(prefix)]


def test_classes_within_the_host_pass(check):
    assert lines(check(stack("    sizes:\n      large: {cpus: 2, memory: 2GiB, pids: 1024}\n"))) == []


def test_an_empty_map_is_refused(check):
    assert errors(check(stack("    sizes: {}\n"))) == [
        "stack.yaml:51:12: $.pools.web.sizes: pool 'web' declares an empty map of size classes: give at least one "
        "(e.g. `large: {cpus: 2, memory: 4GiB}`), or leave `sizes` out"]


def test_a_class_that_sets_nothing_is_refused(check):
    assert errors(check(stack("    sizes:\n      same: {}\n"))) == [
        "stack.yaml:52:13: $.pools.web.sizes.same: size class 'same' of pool 'web' sets no limit, so it is the pool's "
        "own limits, which a claim naming no class gets: set at least one of cpus, memory, disk, pids"]


def test_a_bad_class_name_is_refused_with_what_names_may_be(check):
    found = lines(check(stack("    sizes:\n      Large: {cpus: 2}\n")))
    assert len(found) == 1 and found[0].startswith("stack.yaml:52:7: $.pools.web.sizes.Large: 'Large' is not a valid name")
    assert found[0].endswith("lowercase letters, digits and '-', starting with a letter, at most 32 characters")


def test_classes_need_a_runtime_on_every_host_of_the_pool(check):
    assert errors(check(stack("    sizes:\n      large: {cpus: 2}\n", runtime=False))) == [
        "stack.yaml:47:9: $.pools.web.hosts[0]: pool 'web' declares size classes, which the runtime applies at claim "
        "time, but host 'local' declares no runtime (`hosts.local.runtime`)"]


def test_a_class_over_the_hosts_capacity_is_refused_whatever_the_overcommit(check):
    text = stack("    sizes:\n      huge: {cpus: 8, memory: 16GiB}\n",
                 ("      disk: 20GiB\n", "      disk: 20GiB\n    overcommit: {cpus: 4, memory: 4}\n"))
    assert errors(check(text)) == [
        "stack.yaml:53:20: $.pools.web.sizes.huge.cpus: size class 'huge' of pool 'web' gives one sandbox 8 CPUs "
        "but host 'local' has 4 (`hosts.local.capacity.cpus`): no sandbox can be given more than its host has",
        "stack.yaml:53:31: $.pools.web.sizes.huge.memory: size class 'huge' of pool 'web' gives one sandbox 16GiB of "
        "memory but host 'local' has 8GiB (`hosts.local.capacity.memory`): no sandbox can be given more than its "
        "host has"]


def test_capacity_counts_the_largest_class_at_the_ceiling(check):
    # 3 sandboxes at most, each may be claimed `large` (2 CPUs): 6 CPUs on a 4-CPU host. Warm at 0.5 they would fit.
    text = stack("    max: 3\n    sizes:\n      large: {cpus: 2}\n      small: {cpus: 0.25}\n")
    assert errors(check(text), "host-capacity") == [
        "stack.yaml:7:13: $.hosts.local.capacity.cpus: pools on host 'local' need 6 of cpus (web: 3 × 2 (size class "
        "'large')) but capacity 4 × overcommit 1 allows 4"]
    assert errors(check(stack("    max: 2\n    sizes:\n      large: {cpus: 2}\n")), "host-capacity") == []


def test_a_class_memory_must_hold_the_templates_tmpfs_and_processes(check):
    # /tmp 64MiB + /dev/shm 16MiB (built-in) + 32MiB for processes.
    assert errors(check(stack("    sizes:\n      tiny: {memory: 96MiB}\n      odd: {memory: 100.5MiB}\n"))) == [
        "stack.yaml:52:22: $.pools.web.sizes.tiny.memory: size class 'tiny' of pool 'web' has 96MiB of memory but "
        "template 'web''s tmpfs paths and /dev/shm can hold 80MiB, leaving less than 32MiB for processes: give it at "
        "least 112MiB",
        "stack.yaml:53:21: $.pools.web.sizes.odd.memory: 100.5MiB cannot be enforced exactly: Docker limits memory "
        "in whole MiB, at least 6MiB"]


def test_a_class_disk_must_hold_the_writable_paths_and_a_different_one_needs_on_demand(check):
    assert errors(check(stack("    sizes:\n      tiny: {disk: 32MiB}\n"))) == [
        "stack.yaml:52:20: $.pools.web.sizes.tiny.disk: size class 'tiny' of pool 'web' has 32MiB of disk but "
        "template 'web''s writable paths add up to 64MiB"]
    assert errors(check(stack("    sizes:\n      big: {disk: 1GiB}\n"))) == [
        "stack.yaml:52:19: $.pools.web.sizes.big.disk: size class 'big' of pool 'web' has 1GiB of disk, not the "
        "pool's 256MiB: a running sandbox's disk cannot change, so only a sandbox created on demand for the claim "
        "can have it, and the pool has no ceiling above its warm sandboxes: set `max` above `replicas`, or leave the "
        "class's disk out"]
    # With a ceiling above the warm sandboxes (no secret env: rule ondemand-secret-env) it passes; the pool's own
    # disk needs nothing.
    assert errors(check(stack("    max: 2\n    sizes:\n      big: {disk: 1GiB}\n      same: {disk: 256MiB}\n"))) == []
