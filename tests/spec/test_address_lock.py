"""The address lock beside a spec file (sandstack.spec.addresses): read with the spec, and refused, located in the
lock, when it is stale (the spec's hosts, pools, gateway pools, egress or ingress changed since `sandstack lock`) or
edited by hand (its digest, overlapping or foreign subnets, ports out of range or held twice)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable

import pytest
import yaml

from sandstack.spec import check_file, load_stack
from sandstack.spec.addresses import AddressLock, lock_path, render
from sandstack.tooling.lock import lock_file
from testbed.specs import host, spec, write_spec

GATEWAY = {"base_image": "busybox:1.36", "network": {"egress": "allow-list", "allow": ["example.com"]}}
CLOSED = {"base_image": "busybox:1.36", "network": {"egress": "deny-all"}}
BASE = spec({"web": GATEWAY, "db": CLOSED})
# What `sandstack lock` writes for BASE (stack 't'), lines 5 on (its header is 4 lines).
LOCKED = """\
version: 1
hosts:
  local:
    subnet_pool: 10.213.0.0/16
    egress_subnet: 10.213.48.0/23
    pools:
      db: {subnet: 10.213.234.0/23}
      web: {subnet: 10.213.70.0/23, gateway_port: 30995}
"""
RUN = "run `sandstack lock stacks/stack.yaml`"


def _locked(tmp_path: Path, data: dict = BASE) -> Path:
    path = write_spec(tmp_path, data)
    assert lock_file(str(path), "t", check=False)[0] == 0
    return path


def _check(path: Path) -> list[str]:
    return [d.text() for d in check_file(path, "stacks/stack.yaml").diagnostics]


def test_a_fresh_lock_is_read_with_the_spec(tmp_path):
    path = _locked(tmp_path)
    text = lock_path(path).read_text()
    assert text.splitlines()[4:-1] == LOCKED.splitlines() and text.splitlines()[-1].startswith("digest: sha256:")
    assert _check(path) == []
    lock = load_stack(path).addresses
    assert lock is not None and lock.hosts["local"].pools["web"].gateway_port == 30995


def _with(change: Callable[[dict], None]) -> dict:
    data = copy.deepcopy(BASE)
    change(data)
    return data


def _pool(data: dict, name: str, template: dict, hosts=("local",)) -> None:
    data["templates"][name] = template
    data["pools"][name] = {"template": name, "hosts": list(hosts)}


STALE = {
    "pool added": (lambda d: _pool(d, "new", CLOSED), [
        f"stacks/stack.lock:10:5: $.hosts.local.pools: pool 'new' on host 'local' has no addresses here: {RUN} to "
        "allocate them (no other pool's addresses move)"]),
    "pool removed": (lambda d: d["pools"].pop("db"), [
        f"stacks/stack.lock:11:7: $.hosts.local.pools.db: 'db': stacks/stack.yaml places no pool 'db' on host "
        f"'local': {RUN} to free its addresses"]),
    "subnet_pool changed": (lambda d: d["hosts"]["local"].update(subnet_pool="172.30.0.0/16"), [
        "stacks/stack.lock:8:18: $.hosts.local.subnet_pool: '10.213.0.0/16': host 'local''s subnet_pool is "
        f"'172.30.0.0/16' in stacks/stack.yaml: {RUN} to allocate its addresses there"]),
    "now a gateway pool": (lambda d: d["templates"]["db"].update(network=GATEWAY["network"]), [
        "stacks/stack.lock:11:7: $.hosts.local.pools.db: pool 'db' egresses through the gateway but has no "
        f"gateway_port here: {RUN} to allocate one"]),
    "no gateway pool left": (lambda d: d["templates"]["web"].update(network=CLOSED["network"]), [
        "stacks/stack.lock:9:20: $.hosts.local.egress_subnet: '10.213.48.0/23': host 'local' no longer has a "
        f"gateway pool: {RUN} to free it",
        "stacks/stack.lock:12:51: $.hosts.local.pools.web.gateway_port: 30995: pool 'web' no longer egresses "
        f"through the gateway: {RUN} to free its port"]),
    "host added": (lambda d: d["hosts"].update(other=host("ssh://deploy@other.example.com")), [
        f"stacks/stack.lock:6:1: $.hosts: host 'other' of stacks/stack.yaml has no addresses here: {RUN}"]),
    "host removed": (lambda d: (d["hosts"].update(other=d["hosts"].pop("local")),
                                [p.update(hosts=["other"]) for p in d["pools"].values()]), [
        f"stacks/stack.lock:6:1: $.hosts: host 'other' of stacks/stack.yaml has no addresses here: {RUN}",
        f"stacks/stack.lock:7:3: $.hosts.local: 'local': stacks/stack.yaml has no host 'local': {RUN} to free its "
        "addresses"]),
    "ingress added beside a runtime": (
        lambda d: d["hosts"]["local"].update(runtime={"token": {"secret": "runtimeToken"}},
                                             ingress={"domain": "sbx.example.com"}), [
            "stacks/stack.lock:7:3: $.hosts.local: host 'local' has an ingress beside a runtime but no "
            f"ingress_subnet here: {RUN} to allocate it"]),
}


@pytest.mark.parametrize("case", list(STALE))
def test_a_stale_lock_is_a_located_error_until_sandstack_lock_runs(case, tmp_path):
    change, expected = STALE[case]
    path = _locked(tmp_path)
    write_spec(tmp_path, _with(change))
    assert _check(path) == expected
    assert lock_file(str(path), "t", check=True)[0] == 1  # --check: stale, nothing written
    assert _check(path) == expected
    assert lock_file(str(path), "t", check=False)[0] == 0
    assert _check(path) == []


def _resealed(path: Path, change: Callable[[dict], None]) -> None:
    """The lock changed by hand and its digest made to match: what the other checks must still catch."""
    data = yaml.safe_load(lock_path(path).read_text())
    change(data)
    lock_path(path).write_text(render(AddressLock.model_validate(data), "stack.yaml"))


def _pools(data: dict) -> dict:
    return data["hosts"]["local"]["pools"]


HAND = {
    "overlapping subnets": (lambda d: _pools(d)["db"].update(subnet="10.213.70.0/23"), [
        "stacks/stack.lock:12:21: $.hosts.local.pools.web.subnet: '10.213.70.0/23' overlaps pool 'db''s "
        "'10.213.70.0/23': each pool, the egress and the ingress network have a subnet of their own"]),
    "a subnet over the egress network": (lambda d: _pools(d)["db"].update(subnet="10.213.48.0/23"), [
        "stacks/stack.lock:9:20: $.hosts.local.egress_subnet: '10.213.48.0/23' overlaps pool 'db''s "
        "'10.213.48.0/23': each pool, the egress and the ingress network have a subnet of their own"]),
    "a subnet outside the subnet_pool": (lambda d: _pools(d)["db"].update(subnet="10.9.0.0/23"), [
        "stacks/stack.lock:11:20: $.hosts.local.pools.db.subnet: '10.9.0.0/23' is not a /23 of the host's "
        "subnet_pool '10.213.0.0/16'"]),
    "a port out of range": (lambda d: _pools(d)["web"].update(gateway_port=8080), [
        "stacks/stack.lock:12:51: $.hosts.local.pools.web.gateway_port: 8080 is not a gateway port: one of "
        "30000-39999"]),
    "a port held twice": (lambda d: (_pools(d).update(api={"subnet": "10.213.2.0/23", "gateway_port": 30995})), [
        "stacks/stack.lock:13:51: $.hosts.local.pools.web.gateway_port: 30995 is also pool 'api''s gateway port: "
        "each gateway pool has its own"]),
}


@pytest.mark.parametrize("case", list(HAND))
def test_a_hand_edited_lock_is_a_located_error(case, tmp_path):
    change, expected = HAND[case]
    path = _locked(tmp_path)
    _resealed(path, change)
    # Only the edit is reported: a lock edited by hand is not compared with the spec (a pool added by hand is no
    # stale entry, it is the edit).
    assert _check(path) == expected


def test_an_edit_that_leaves_the_digest_is_refused_by_the_digest_and_sandstack_lock_keeps_it(tmp_path):
    path = _locked(tmp_path)
    lock = lock_path(path)
    text = lock.read_text().replace("10.213.234.0/23", "10.213.236.0/23")
    lock.write_text(text)
    digest = text.splitlines()[-1].removeprefix("digest: ")
    assert _check(path) == [
        f"stacks/stack.lock:13:9: $.digest: '{digest}' does not match the lock's content: it was edited by hand; "
        "restore it from git, or delete it and run `sandstack lock` (every address allocated afresh)"]
    code, lines = lock_file(str(path), "t", check=False)
    assert code == 1 and lines[-1] == (
        f"sandstack: {lock} was not written: sandstack lock keeps what a lock holds, and this one was edited or "
        "broken; restore it from git, or delete it to allocate every address afresh")
    assert lock.read_text() == text


def test_a_lock_that_is_not_a_lock_says_what_one_holds(tmp_path):
    path = _locked(tmp_path)
    lock_path(path).write_text("version: 1\nhosts: {}\nowner: me\n")
    lock_path(path).write_text("version: 2\nhosts: {}\nowner: me\n")
    shape = ("a lock holds 'version: 1', 'hosts' (each with its subnet_pool, egress_subnet, ingress_subnet and "
             "pools, each pool with its subnet and gateway_port) and 'digest', as `sandstack lock` writes it")
    assert _check(path) == [f"stacks/stack.lock:1:10: $.version: is not 1: {shape}",
                            f"stacks/stack.lock:3:1: $.owner: is not a key of a lock: {shape}"]


def test_a_spec_without_a_lock_is_valid_and_allocated_afresh(tmp_path):
    path = write_spec(tmp_path, BASE)
    assert _check(path) == [] and load_stack(path).addresses is None
