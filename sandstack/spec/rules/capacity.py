"""What a host can hold: CPUs, memory and disk with overcommit, GPUs and their device ids, pool subnets."""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from typing import Iterator

from sandstack.spec.errors import Diagnostic
from sandstack.spec.models import NetworkPolicy
from sandstack.spec.models.hosts import POOL_SUBNET_PREFIX
from sandstack.spec.resolve import UnknownProfile, decode_egress, largest_size, pool_sizes
from sandstack.spec.rules.context import Context, placements, rule, running
from sandstack.spec.units import format_cpus, format_size


@rule("host-capacity")
def pools_fit_hosts(ctx: Context) -> Iterator[Diagnostic]:
    need: dict[str, dict[str, list[tuple[str, int, float, str | None]]]] = defaultdict(lambda: defaultdict(list))
    for pool, template_name, host, places in placements(ctx):
        try:
            # At the largest size class: any sandbox up to the ceiling may be claimed at it.
            limits = largest_size(ctx.stack.pools[pool], ctx.limits(template_name))
        except UnknownProfile:
            continue
        for dim in ("cpus", "memory", "disk"):
            # A hibernated session holds its disk, not CPUs or memory: those count the sandboxes running at once.
            count = places if dim == "disk" else running(ctx, pool, places)
            need[host][dim].append((pool, count, getattr(limits, dim), _largest_class(ctx, pool, dim)))
    show = {"cpus": format_cpus, "memory": format_size, "disk": format_size}
    for host, dims in need.items():
        spec = ctx.stack.hosts[host]
        for dim, parts in dims.items():
            total = sum(r * each for _, r, each, _ in parts)
            ratio = getattr(spec.overcommit, dim)
            allowed = getattr(spec.capacity, dim) * ratio
            if total > allowed + 1e-9:
                fmt = show[dim]
                detail = ", ".join(f"{p}: {r} × {fmt(e)}" + (f" (size class {c!r})" if c else "")
                                   for p, r, e, c in parts)
                yield ctx.error(("hosts", host, "capacity", dim),
                                f"pools on host {host!r} need {fmt(total)} of {dim} ({detail}) but capacity "
                                f"{fmt(getattr(spec.capacity, dim))} × overcommit {ratio:g} allows {fmt(allowed)}",
                                "host-capacity")


def _largest_class(ctx: Context, pool: str, dim: str) -> str | None:
    """The size class that gives the pool's largest `dim`, when one gives more than the pool's own limits."""
    spec = ctx.stack.pools[pool]
    limits = ctx.limits(spec.template)
    sizes = pool_sizes(spec, limits)
    best = max(sizes, key=lambda name: getattr(sizes[name], dim), default=None)
    return best if best is not None and getattr(sizes[best], dim) > getattr(limits, dim) else None


@rule("gpu-host")
def gpus_where_hosts_have_them(ctx: Context) -> Iterator[Diagnostic]:
    used: dict[tuple[str, str | None], int] = defaultdict(int)
    for pool, template_name, host, replicas in placements(ctx):
        try:
            gpus = ctx.limits(template_name).gpus
        except UnknownProfile:
            continue
        if gpus is None:
            continue
        inventory = ctx.stack.hosts[host].capacity.gpus
        have = sum(g.count for g in inventory if gpus.type in (None, g.type))
        used[(host, gpus.type)] += gpus.count * replicas
        kind = f"{gpus.type} GPUs" if gpus.type else "GPUs"
        if have == 0:
            # A host with other GPU types must not read as a host with no GPUs at all.
            types = ", ".join(dict.fromkeys(g.type for g in inventory))
            has = f"has only {types}" if inventory else "declares none (`hosts.*.capacity.gpus`)"
            yield ctx.error(("pools", pool, "hosts", ctx.stack.pools[pool].hosts.index(host)),
                            f"template {template_name!r} requests {kind} but host {host!r} {has}", "gpu-host")
        elif used[(host, gpus.type)] > have:
            yield ctx.error(("pools", pool, "replicas"), f"pools on host {host!r} request "
                            f"{used[(host, gpus.type)]} {kind}; it has {have}", "gpu-host")


@rule("gpu-ids")
def gpu_ids_match_counts(ctx: Context) -> Iterator[Diagnostic]:
    for host, spec in ctx.stack.hosts.items():
        seen: dict[str, int] = {}
        for index, inventory in enumerate(spec.capacity.gpus):
            if inventory.ids is None:
                continue
            where = ("hosts", host, "capacity", "gpus", index, "ids")
            if len(inventory.ids) != inventory.count:
                yield ctx.error(where, f"{len(inventory.ids)} device ids for {inventory.count} {inventory.type} "
                                "GPUs: list exactly `count` ids", "gpu-ids")
            for position, device in enumerate(inventory.ids):
                if device in seen:
                    yield ctx.error((*where, position), f"device id {device!r} is listed twice on host {host!r}",
                                    "gpu-ids")
                seen[device] = index


@rule("subnet-pool")
def pools_fit_subnet_pool(ctx: Context) -> Iterator[Diagnostic]:
    pools_on: dict[str, set[str]] = defaultdict(set)
    gateway_on: set[str] = set()  # hosts with a gateway, whose egress network takes a /23 too
    for pool, template, host, _ in placements(ctx):
        pools_on[host].add(pool)
        policy = ctx.stack.templates[template].network or ctx.stack.defaults.network or NetworkPolicy()
        if decode_egress(policy.egress, policy.log, policy.protocols)[0] == "gateway":
            gateway_on.add(host)
    for name, host in ctx.stack.hosts.items():
        where = ("hosts", name, "subnet_pool")
        try:
            network = ipaddress.IPv4Network(host.subnet_pool, strict=True)
        except ValueError as exc:
            loose = _loose_v4(host.subnet_pool)
            hint = f"; did you mean '{loose}'?" if loose else ""
            yield ctx.error(where, f"{host.subnet_pool!r} is not an IPv4 network ({exc}){hint}", "subnet-pool")
            continue
        if network.prefixlen > POOL_SUBNET_PREFIX:
            yield ctx.error(where, f"{host.subnet_pool!r} is smaller than one pool's /{POOL_SUBNET_PREFIX}: use a prefix "
                            f"of /{POOL_SUBNET_PREFIX} or shorter, e.g. '10.213.0.0/16'", "subnet-pool")
        # An ingress beside a runtime has a fixed subnet too, to reach the runtime (sandstack.plan.network
        # `ingress_subnet`).
        elif len(pools_on[name]) + (name in gateway_on) + bool(host.ingress and host.runtime) > \
                2 ** (POOL_SUBNET_PREFIX - network.prefixlen):
            room, pools = 2 ** (POOL_SUBNET_PREFIX - network.prefixlen), len(pools_on[name])
            extra = [n for n, on in (("the gateway's egress network", name in gateway_on),
                                     ("the ingress's network", bool(host.ingress and host.runtime))) if on]
            parts = [f"{pools} pool{'s' if pools > 1 else ''}", *extra]
            placed = f"{', '.join(parts[:-1])} and {parts[-1]}" if extra else parts[0]
            yield ctx.error(where, f"{host.subnet_pool!r} has room for {room} pool network{'s' if room > 1 else ''} "
                            f"(/{POOL_SUBNET_PREFIX} each) but {placed} are placed on host {name!r}: use a larger "
                            "network", "subnet-pool")


def _loose_v4(text: str) -> str | None:
    try:
        return str(ipaddress.IPv4Network(text, strict=False))
    except ValueError:
        return None


# This module's rules, in the order they run (the registry, sandstack.spec.rules.RULES, lists each module).
RULES = (pools_fit_hosts, gpus_where_hosts_have_them, gpu_ids_match_counts, pools_fit_subnet_pool,)
