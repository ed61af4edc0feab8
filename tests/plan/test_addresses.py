"""Stable addresses (issue 36, item 3): with the address lock as memory, adding or removing a pool never moves
another pool's subnet, gateway port or resolver address, nor the gateway's egress network (its resolver) or the
ingress's network, whatever the names and collisions; without a lock, every address is allocated as before."""

from __future__ import annotations

import dataclasses
import ipaddress
from pathlib import Path

import pytest

from sandstack.plan.addresses import allocate, host_lock, locked
from sandstack.plan.network import egress_subnet, gateway_ports, ingress_subnet, pool_subnets
from sandstack.plan.stack import plan_stack
from sandstack.spec import load_data
from sandstack.spec.addresses import HostNeeds
from testbed.specs import host, spec

SPACE = "10.213.0.0/16"
GATEWAY = {"base_image": "busybox:1.36", "network": {"egress": "allow-list", "allow": ["example.com"]}}
CLOSED = {"base_image": "busybox:1.36", "network": {"egress": "deny-all"}}
EXISTING = ("web", "api")  # two gateway pools, on a host with a runtime and an ingress


def _first_colliding(target, of, after: str, names) -> str:
    """The first name that sorts before `after` and whose fresh allocation (`of`) is `target`."""
    return next(n for n in names if n < after and of(n) == target)


def _names(prefix: str, count: int):
    return (f"{prefix}{i}" for i in range(count))


def _stack(tmp_path: Path, pools: dict[str, dict]):
    runtime = {"token": {"secret": "runtimeToken"}}
    data = spec({name: template for name, template in pools.items()},
                hosts={"local": host(runtime=runtime, ingress={"domain": "sbx.example.com"})})
    return load_data(data, tmp_path)


def _addresses(plan) -> dict:
    """Every address of the host's plan a new pool must not move."""
    h = plan.hosts["local"]
    return {**{f"{pool} subnet": str(net.subnet) for pool, net in h.networks.items()},
            **{f"{pool} gateway port": net.gateway_port for pool, net in h.networks.items()},
            **{f"{pool} resolver": net.resolver for pool, net in h.networks.items()},
            "egress": str(h.egress_subnet), "gateway resolver": h.gateway.resolver,
            "ingress": str(h.ingress.wake.subnet), "runtime on the ingress network": h.ingress.wake.runtime_address}


def test_new_pools_colliding_with_every_existing_address_move_none_of_them_with_the_lock(tmp_path):
    before = {name: GATEWAY for name in EXISTING}
    fresh = _stack(tmp_path, before)
    planned = plan_stack(fresh, "t")
    h = planned.hosts["local"]
    web = h.networks["web"]
    # New pools, each sorting first and hashing exactly onto an address the host holds: web's subnet, web's gateway
    # port, the egress network's subnet (the gateway's resolver), the ingress network's subnet.
    subnet_of = lambda n: pool_subnets("t", [n], SPACE)[n]  # noqa: E731
    new = {
        _first_colliding(web.subnet, subnet_of, "web", _names("p", 1000)): GATEWAY,
        _first_colliding(web.gateway_port, lambda n: gateway_ports("t", [n])[n], "web", _names("a", 40000)): GATEWAY,
        _first_colliding(h.egress_subnet, subnet_of, "web", _names("e", 1000)): CLOSED,
        _first_colliding(h.ingress.wake.subnet, subnet_of, "web", _names("i", 1000)): CLOSED,
    }
    assert len(new) == 4
    grown = _stack(tmp_path, {**before, **new})
    without = _addresses(plan_stack(grown, "t"))
    # Without memory, each of them takes what it hashes to: every kind of address moves.
    moved = {k for k, v in _addresses(planned).items() if without[k] != v}
    assert moved >= {"web subnet", "web gateway port", "web resolver", "egress", "gateway resolver", "ingress",
                     "runtime on the ingress network"}
    # With the first allocation's lock (what `sandstack lock` wrote), then the lock `sandstack lock` writes for the
    # grown spec: nothing that was there moves, and the new pools have addresses of their own.
    lock = locked(fresh, "t")
    for memory in (lock, locked(grown, "t", lock)):
        after = _addresses(plan_stack(dataclasses.replace(grown, addresses=memory), "t"))
        assert {k: after[k] for k in _addresses(planned)} == _addresses(planned)
        subnets = [ipaddress.IPv4Network(v) for k, v in after.items() if k.endswith(" subnet") or k in
                   ("egress", "ingress")]
        assert len(set(subnets)) == len(subnets) == 6 + 2
        ports = [v for k, v in after.items() if k.endswith("gateway port") and v is not None]
        assert len(set(ports)) == len(ports) == 4


def test_removing_a_pool_frees_its_addresses_and_moves_nothing_else(tmp_path):
    three = _stack(tmp_path, {"web": GATEWAY, "api": GATEWAY, "db": CLOSED})
    lock = locked(three, "t")
    two = _stack(tmp_path, {"web": GATEWAY, "db": CLOSED})
    relocked = locked(two, "t", lock)
    assert set(relocked.hosts["local"].pools) == {"web", "db"}
    assert {p: relocked.hosts["local"].pools[p] for p in ("web", "db")} == {
        p: lock.hosts["local"].pools[p] for p in ("web", "db")}
    assert relocked.hosts["local"].egress_subnet == lock.hosts["local"].egress_subnet


def test_a_slot_just_freed_is_not_given_to_a_new_pool_in_the_same_change():
    # 'api' held the subnet the new pool hashes to: freed in this change, a new network there would be created
    # before the old one is deleted, so the new pool probes past it while another /23 is free.
    needs = HostNeeds(SPACE, ("api",), ("api",), False)
    held = allocate("t", needs)
    new = next(n for n in _names("x", 1000) if pool_subnets("t", [n], SPACE)[n] == held.subnets["api"])
    after = allocate("t", HostNeeds(SPACE, (new,), (new,), False), host_lock(needs, held))
    assert after.subnets[new] != held.subnets["api"] and after.subnets[new] == pool_subnets(
        "t", [new], SPACE, held=[held.subnets["api"]])[new]
    # With nothing else free, the freed slot is taken after all: a /22 holds two /23s.
    small = HostNeeds("192.168.4.0/22", ("a", "b"), (), False)
    two = allocate("t", small)
    swapped = allocate("t", HostNeeds("192.168.4.0/22", ("b", "c"), (), False), host_lock(small, two))
    assert (swapped.subnets["b"], swapped.subnets["c"]) == (two.subnets["b"], two.subnets["a"])


def test_without_a_lock_the_allocation_is_as_before():
    pools = tuple(sorted(f"p{i}" for i in range(40)))
    gateway = pools[::3]
    got = allocate("dev", HostNeeds(SPACE, pools, gateway, True))
    subnets = pool_subnets("dev", list(pools), SPACE)
    egress = egress_subnet("dev", subnets, SPACE)
    assert got.subnets == subnets and got.ports == gateway_ports("dev", list(gateway)) and got.egress == egress
    assert got.ingress == ingress_subnet("dev", {*subnets.values(), egress}, SPACE)


def test_a_lock_of_another_subnet_pool_holds_nothing(tmp_path):
    fresh = _stack(tmp_path, {"web": GATEWAY})
    lock = locked(fresh, "t")
    needs = HostNeeds("172.30.0.0/16", ("web",), ("web",), True)
    assert allocate("t", needs, lock.hosts["local"]) == allocate("t", needs)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_committed_locks_hold_the_allocations_of_their_stacks(stack):
    from sandstack.spec import load_stack
    from testbed.specs import STACKS

    spec_ = load_stack(STACKS / f"{stack}.yaml")
    assert spec_.addresses is not None
    assert _plan_addresses(plan_stack(spec_, stack)) == _plan_addresses(
        plan_stack(dataclasses.replace(spec_, addresses=None), stack))


def _plan_addresses(plan) -> dict:
    return {host: ({p: (str(n.subnet), n.gateway_port) for p, n in h.networks.items()}, str(h.egress_subnet),
                   str(h.ingress.wake.subnet) if h.ingress and h.ingress.wake else None)
            for host, h in plan.hosts.items()}
