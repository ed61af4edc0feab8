"""Each host's addresses: its pools' subnets and gateway ports, its egress and ingress networks' subnets, kept from
the address lock where it holds them and allocated afresh only where it does not (docs/design/addresses.md).

`allocate` is the one place they are chosen. Without a lock (`memory` None) it allocates exactly as before there was
one: each pool hashed from the stack and its name, probing past collisions in name order. With one, every pool,
port and network the lock holds keeps its slot, and what it lacks probes past every slot the lock holds (a slot the
lock holds for a pool gone is taken only when nothing else is free), so adding or removing a pool never moves
another's subnet, gateway port or resolver address. `locked` is what `sandstack lock` writes.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from sandstack.plan.network import egress_subnet, gateway_ports, ingress_subnet, pool_subnets
from sandstack.spec.addresses import AddressLock, HostLock, HostNeeds, PoolLock, stack_needs
from sandstack.spec.resolve import ResolvedStack

Net = ipaddress.IPv4Network


@dataclass(frozen=True)
class Allocation:
    """One host's addresses."""

    subnets: dict[str, Net]  # by pool
    ports: dict[str, int]  # by gateway pool
    egress: Net | None = None  # the gateway's egress network (its resolver on the first address)
    ingress: Net | None = None  # the ingress's network beside a runtime


def allocate(stack: str, needs: HostNeeds, memory: HostLock | None = None) -> Allocation:
    """The host's addresses: the lock's (`memory`) where it holds them for what the host still needs; the rest
    allocated past them. A lock of another subnet_pool holds nothing that applies."""
    if memory is not None and memory.subnet_pool != needs.subnet_pool:
        memory = None
    pools = memory.pools if memory else {}
    subnets = {pool: Net(p.subnet) for pool, p in pools.items()}
    ports = {pool: p.gateway_port for pool, p in pools.items() if p.gateway_port is not None}
    egress = Net(memory.egress_subnet) if memory and memory.egress_subnet else None
    ingress = Net(memory.ingress_subnet) if memory and memory.ingress_subnet else None
    egress, ingress = egress if needs.egress else None, ingress if needs.ingress else None
    kept = {pool: net for pool, net in subnets.items() if pool in needs.pools}
    held = {net for net in (egress, ingress) if net is not None}
    freed = (set(subnets.values()) | {Net(n) for n in (memory.egress_subnet, memory.ingress_subnet) if n}
             if memory else set()) - set(kept.values()) - held
    new_subnets = pool_subnets(stack, list(needs.pools), needs.subnet_pool, kept, held, freed)
    kept_ports = {pool: port for pool, port in ports.items() if pool in needs.gateway_pools}
    new_ports = gateway_ports(stack, list(needs.gateway_pools), kept_ports,
                              set(ports.values()) - set(kept_ports.values()))
    if needs.egress and egress is None:
        egress = egress_subnet(stack, new_subnets, needs.subnet_pool, held, freed)
    if needs.ingress and ingress is None:
        ingress = ingress_subnet(stack, {*new_subnets.values(), *([egress] if egress else [])}, needs.subnet_pool,
                                 freed)
    return Allocation(new_subnets, new_ports, egress, ingress)


def host_lock(needs: HostNeeds, allocation: Allocation) -> HostLock:
    return HostLock(subnet_pool=needs.subnet_pool,
                    egress_subnet=str(allocation.egress) if allocation.egress else None,
                    ingress_subnet=str(allocation.ingress) if allocation.ingress else None,
                    pools={pool: PoolLock(subnet=str(net), gateway_port=allocation.ports.get(pool))
                           for pool, net in allocation.subnets.items()})


def locked(spec: ResolvedStack, stack: str, memory: AddressLock | None = None) -> AddressLock:
    """The lock of a spec: every host's addresses, kept from `memory` (the lock before) where it holds them."""
    hosts = {}
    for host, needs in stack_needs(spec).items():
        hosts[host] = host_lock(needs, allocate(stack, needs, memory.hosts.get(host) if memory else None))
    return AddressLock(version=1, hosts=hosts).sealed()
