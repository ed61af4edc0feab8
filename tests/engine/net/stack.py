"""The stack a network test module deploys, with its Lab.

- `NetStack` / `deployed(...)`: one stack per test module through its own `Harness`
  (`deploy.shared_deployment`), always torn down; the Lab goes first (a test container still attached to a
  sandstack network would make its delete fail).
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import docker as docker_sdk

from testbed.deploy import SharedDeployment, shared_deployment
from tests.engine.net.lab import Lab, sweep_dead_labs
from tests.engine.net.probes import SANDBOX_PORT, probe, tcp
from testbed.waiting import wait_until


@dataclass
class NetStack(SharedDeployment):
    """A module's deployed stack plus its Lab."""

    lab: Lab
    client: docker_sdk.DockerClient
    extra: dict = field(default_factory=dict)

    def sandbox(self, pool: str, index: int = 0):
        return self.client.containers.get(self.name(pool, str(index)))

    @property
    def gateway(self):
        return self.client.containers.get(self.name("gateway"))

    @property
    def guard(self):
        return self.client.containers.get(self.name("guard"))

    def network(self, role: str):
        return self.client.networks.get(self.name(role))

    def ip(self, container, role: str | None = None) -> str:
        """`container`'s address on the stack network `role` (pool name or "egress"), or its only one."""
        container.reload()
        networks = container.attrs["NetworkSettings"]["Networks"]
        if role is None:
            assert len(networks) == 1, f"{container.name} is on {sorted(networks)}"
            return next(iter(networks.values()))["IPAddress"]
        return networks[self.name(role) if not role.startswith("sntest-") else role]["IPAddress"]

    def bridge_gateway(self, role: str) -> str:
        """The host's own address on a stack network's bridge."""
        return self.network(role).attrs["IPAM"]["Config"][0]["Gateway"]

    def subnets(self) -> list[str]:
        nets = self.client.networks.list(filters={"label": f"sandstack.stack={self.stack}"})
        return [cfg["Subnet"] for n in nets for cfg in n.attrs["IPAM"]["Config"]]

    def gateway_port(self, pool: str) -> int:
        env = dict(e.split("=", 1) for e in self.sandbox(pool).attrs["Config"]["Env"])
        return int(env["HTTP_PROXY"].rsplit(":", 1)[1])

    def wait_serving(self, pools: dict[str, int]) -> None:
        """Waits until every sandbox's own server answers inside it (the supervisor starts the command once
        the guard is ready)."""
        for pool, replicas in pools.items():
            for i in range(replicas):
                box = self.sandbox(pool, i)
                wait_until(lambda: probe(box, {"self": tcp("127.0.0.1", SANDBOX_PORT)})["self"].startswith(
                    "connected"), 30, what=f"{box.name} to serve")


@contextlib.contextmanager
def deployed(module_file: str, tag: str, workdir: Path, spec_text: str, client, image: str,
             pools: dict[str, int], secret_config: dict | None = None) -> Iterator[NetStack]:
    """Deploys `spec_text` once for a test module (stack name `n<tag><pid>`), yields it with a fresh Lab,
    and always removes the Lab first, then the stack, then checks the host is clean."""
    sweep_dead_labs(client)
    with shared_deployment(module_file, workdir, spec_text, stack=f"n{tag}{os.getpid() % 10000}",
                           secret_config=secret_config) as shared:
        lab = Lab(client, image)
        try:
            net = NetStack(shared.harness, shared.deployment, shared.result, shared.label, lab, client)
            net.wait_serving(pools)
            yield net
        finally:
            lab.close()


def access_log(net: NetStack) -> list[str]:
    """The gateway's squid access log, one request a line."""
    code, out = net.gateway.exec_run(["cat", "/var/log/squid/access.log"])
    assert code == 0, out
    return out.decode().splitlines()


def logged_sandbox(name: str, ip: str) -> str:
    """A pattern of the access log's `sandbox=` field: the reverse name of the client's address once squid's cache
    holds it, else the address itself (squid logs what its FQDN cache has when the request ends: a sandbox's first
    request may end before the lookup of its address does; docs/design/egress-log.md)."""
    return rf"(?:{re.escape(name)}\S*|{re.escape(ip)})"


def wait_logged_by_name(net: NetStack, sandbox, url: str) -> None:
    """Requests of `sandbox` to `url` until one is logged under its name (the reverse lookup answered)."""
    from tests.engine.net.probes import curl

    def named() -> bool:
        curl(sandbox, url)
        return any(f" sandbox={sandbox.name}" in line for line in access_log(net)[-3:])
    wait_until(named, 20, what=f"a request of {sandbox.name} logged under its name")
