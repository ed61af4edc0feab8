"""The address lock's file (docs/design/addresses.md): its content as a model, its digest and its text. A leaf of the
spec layer (the resolved stack holds a lock; sandstack.spec.addresses reads and checks one against a spec)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict

LOCK_SUFFIX = ".lock"  # not `.lock.yaml`: `stacks/*.yaml` (validate, check, the CI loop) must not take it for a stack
GATEWAY_PORT_BASE = 30000
GATEWAY_PORT_SPAN = 10000


def lock_path(spec: str | os.PathLike[str]) -> Path:
    """The lock beside a spec: `stacks/dev.lock` for `stacks/dev.yaml`."""
    return Path(spec).with_suffix(LOCK_SUFFIX)


# --- the lock's content --------------------------------------------------------------------------------------

class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class PoolLock(_Model):
    subnet: str
    gateway_port: int | None = None


class HostLock(_Model):
    subnet_pool: str
    egress_subnet: str | None = None
    ingress_subnet: str | None = None
    pools: dict[str, PoolLock] = {}


class AddressLock(_Model):
    """A lock's content: per host, the addresses allocated (`digest`: of the rest, so a hand edit shows)."""

    version: Literal[1]
    hosts: dict[str, HostLock]
    digest: str = ""

    def content(self) -> dict:
        return self.model_dump(mode="json", exclude={"digest"}, exclude_none=True)

    def computed_digest(self) -> str:
        text = json.dumps(self.content(), sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()

    def sealed(self) -> AddressLock:
        return self.model_copy(update={"digest": self.computed_digest()})


HEADER = """\
# The addresses sandstack allocated to the pools of {spec} beside this file: each pool's subnet (its logging
# resolver is the subnet's first address) and gateway port, each host's egress network (the gateway's resolver) and
# ingress network. Written by `sandstack lock`; commit it with the spec. A new pool gets addresses no one holds, a
# removed pool's are freed, nothing else moves. Do not edit it: the digest refuses a hand edit.
"""


def render(lock: AddressLock, spec_name: str) -> str:
    """The lock file's text: a header, then the content (pools one line each, by name), then its digest."""
    hosts = {}
    for name, host in sorted(lock.hosts.items()):
        entry = host.model_dump(mode="json", exclude_none=True, exclude={"pools"})
        entry["pools"] = {pool: p.model_dump(mode="json", exclude_none=True) for pool, p in sorted(host.pools.items())}
        hosts[name] = entry
    body = yaml.safe_dump({"version": lock.version, "hosts": hosts}, sort_keys=False, default_flow_style=None,
                          width=1000)
    return HEADER.format(spec=spec_name) + body + f"digest: {lock.sealed().digest}\n"


