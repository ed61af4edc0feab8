"""What a host's runtime keeps on the host's disk: the pools' snapshots and hibernation copies, each pool bounded by
its `session.snapshot_storage`."""

from __future__ import annotations

from typing import Iterator

from urllib.parse import urlsplit

from sandstack.spec.contract import LOOPBACK_REGISTRY_HOSTS
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


@rule("snapshot-store")
def snapshot_store_is_shared_and_safe(ctx: Context) -> Iterator[Diagnostic]:
    """A snapshot store is what every host of a pool reads (docs/design/snapshot-store.md): the hosts of a pool
    with a runtime declare the same registry and repository, or a snapshot taken on one is not found on another;
    plain http carries the store's password and the sessions' files in clear, so it is for a registry on the host
    itself; its password is a secret of its own, not a token's (a token is sent to the runtime by its callers)."""
    for host, spec in ctx.stack.hosts.items():
        runtime = spec.runtime
        store = runtime.snapshot_store if runtime is not None else None
        if runtime is None or store is None:
            continue
        path = ("hosts", host, "runtime", "snapshot_store")
        name = urlsplit(store.registry).hostname or ""
        if store.registry.startswith("http://") and name not in LOOPBACK_REGISTRY_HOSTS:
            yield ctx.error(path + ("registry",), f"registry {store.registry!r} is plain http on another machine: it "
                            "would carry the store's password and the sessions' files in clear; use https:// (plain "
                            "http only for a registry on the host itself: " + ", ".join(LOOPBACK_REGISTRY_HOSTS) + ")",
                            "snapshot-store")
        if store.ca is not None and store.registry.startswith("http://"):
            yield ctx.error(path + ("ca",), f"registry {store.registry!r} is plain http: a CA checks an https "
                            "registry's certificate; use https:// or leave `ca` out", "snapshot-store")
        tokens = {runtime.token.secret: "the runtime's token"}
        tokens.update({t.secret: f"scoped token {scope!r}" for scope, t in runtime.tokens.items()})
        if store.password.secret in tokens:
            yield ctx.error(path + ("password", "secret"), f"the snapshot store's password secret "
                            f"{store.password.secret!r} is also {tokens[store.password.secret]}'s on host {host!r}: "
                            "a token's holders would know the store's password; give it a secret of its own",
                            "snapshot-store")
    for pool, placed in ctx.stack.pools.items():
        served = [(h, ctx.stack.hosts[h].runtime) for h in placed.hosts
                  if h in ctx.stack.hosts and ctx.stack.hosts[h].runtime is not None]
        stores = {h: (r.snapshot_store.registry, r.snapshot_store.repository) if r.snapshot_store else None
                  for h, r in served}
        if len(set(stores.values())) < 2:
            continue
        first = served[0][0]
        for index, host in enumerate(placed.hosts):
            if host in stores and stores[host] != stores[first]:
                yield ctx.error(("pools", pool, "hosts", index), f"pool {pool!r} is on host {first!r} with "
                                f"{_store_words(stores[first])} and on host {host!r} with "
                                f"{_store_words(stores[host])}: "
                                "a snapshot taken on one would not be found on the other; declare the same "
                                "`runtime.snapshot_store` registry and repository on every host of the pool",
                                "snapshot-store")


def _store_words(store: tuple[str, str] | None) -> str:
    return "no snapshot store" if store is None else f"snapshot store {store[0]}/{store[1]}"


# This module's rules (the registry, sandstack.spec.rules.RULES, lists each module).
RULES = (snapshot_storage_fits_the_host, snapshot_store_is_shared_and_safe)
