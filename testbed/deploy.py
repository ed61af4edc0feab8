"""Deploying a sandstack spec to the local daemon through the engine harness, as `pulumi up` would.

`engine_spec(...)` writes a spec that uses only the locally built test images (nothing is pulled) and
`Deployment.up()` runs the real Pulumi program (`SandboxStack` from that spec) under the harness.

`shared_deployment(...)`: one stack per test module, applied once through its own `Harness` and torn down
at module end (Docker objects by the harness; the guard's host-level cgroups and firewall rules are checked
gone too, `host_state.clear_host_state`). Tests that only read share it.

Every deployment runs under a leak guard (`testbed/leak_guard.py`, `Deployment.guarded`): a packet from its
networks that would have left this machine is dropped, counted, and fails the harness's teardown.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import docker as docker_sdk
import yaml

from sandstack.plan.contract import LABEL_STACK
from sandstack.plan.naming import docker_name, egress_network_name, infra_name
from sandstack.program import program as sandstack_program
from sandstack.spec.roles import HOST_ROLES
from testbed.harness import coverage
from testbed.harness.harness import Harness, RunResult
from testbed.harness.teardown import remaining
from testbed.host_state import clear_host_state
from testbed.leak_guard import LeakGuard, sweep_dead_leak_guards
from testbed.specs import spec, spec_text

# A stack's host services, whose containers are named with `infra_name` (the host roles with a container).
HOST_SERVICES = tuple(name for name, role in HOST_ROLES.items() if role.container)

_COUNTER = itertools.count()
_SLOTS = itertools.count()


# /18s of 198.19.0.0/16 below 198.19.192.0 (198.19.255.0/24 is the extra test hosts' links): a /20 (8 /23s) was
# too small for the change drill, whose new pool met "failed to allocate gateway (198.19.6.1): Address already in use"
# in its own /20 (a CI run, then again alone).
SLOTS = 3


def free_slot(first: int) -> str:
    """The first /18 of SLOTS, from slot `first` on, that no network on the local daemon overlaps (so few that
    counting alone would wrap onto a stack still alive)."""
    try:
        client = docker_sdk.from_env()
        try:
            taken = [ipaddress.ip_network(c["Subnet"], strict=False) for n in client.networks.list(greedy=True)
                     for c in ((n.attrs.get("IPAM") or {}).get("Config") or []) if c.get("Subnet")]
        finally:
            client.close()
    except docker_sdk.errors.DockerException:  # no daemon (a test that only writes a spec): counting alone
        taken = []
    for i in range(SLOTS):
        pool = ipaddress.ip_network(f"198.19.{64 * ((first + i) % SLOTS)}.0/18")
        if not any(pool.overlaps(net) for net in taken if net.version == 4):
            return str(pool)
    return f"198.19.{64 * (first % SLOTS)}.0/18"  # all taken: as before (the daemon says which clashes)


def unique_stack() -> str:
    """A short stack name per deployment: Docker names and bridge names derive from it."""
    return f"e{next(_COUNTER)}x{os.getpid() % 1000}"


def engine_spec(infra_image: str, templates: dict, pools: dict | None = None, *, capacity: dict | None = None,
                profiles: dict | None = None, defaults: dict | None = None,
                dns_upstream: tuple[str, ...] = ("127.0.0.1",)) -> str:
    """A stack spec on the local daemon. `pools` defaults to one replica of each template. `Deployment`
    gives the host its own `subnet_pool`. The logging resolvers forward to `dns_upstream`: by default the host's
    loopback, where nothing answers port 53, so that no lookup from a test ever leaves this machine (the host's
    own resolvers, the default of a real stack, are outside it)."""
    local = {"endpoint": "unix:///var/run/docker.sock", "infra_image": infra_image,
             # disk: what a runtime may keep of five pools' snapshots (8GiB each by default: rule snapshot-storage)
             "capacity": capacity or {"cpus": 2, "memory": "8GiB", "disk": "64GiB"},
             "overcommit": {"cpus": 8, "memory": 2}, "dns_upstream": list(dns_upstream)}
    return spec_text(spec(templates, pools, hosts={"local": local}, profiles=profiles, defaults=defaults))


@dataclass
class Deployment:
    """One stack on the local daemon: write its spec, `up()` it (again), read its sandboxes."""

    harness: object
    workdir: Path
    stack: str = field(default_factory=unique_stack)
    secret_config: dict = field(default_factory=dict)
    slot: int = field(default_factory=lambda: next(_SLOTS))
    leak_guard: LeakGuard | None = field(default=None, init=False)
    _pool: str | None = field(default=None, init=False, repr=False)

    @property
    def spec_path(self) -> Path:
        return self.workdir / "stack.yaml"

    @property
    def subnet_pool(self) -> str:
        """This deployment's own /18 of 198.19.0.0/16 (`free_slot`; room for 32 /23 networks): stacks alive at the
        same time never overlap, and every apply of one deployment uses the same one
        (so its networks are not replaced). Not a private range: the test servers on the stack's egress network
        stand in for the internet, and the gateway and the guard refuse private destinations (docs/design/egress.md);
        198.18.0.0/15 is reserved for benchmarking (RFC 2544), routed nowhere from this machine, and only its bridges
        carry it."""
        if self._pool is None:
            self._pool = free_slot(self.slot)
        return self._pool

    def write(self, spec_text: str, files: dict[str, str] | None = None) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        data = yaml.safe_load(spec_text)
        for host in (data.get("hosts") or {}).values():
            if isinstance(host, dict) and host.get("endpoint", "").startswith("unix://"):
                host.setdefault("subnet_pool", self.subnet_pool)
        header = "# yaml-language-server: $schema=../schemas/stack.schema.json\n"
        self.spec_path.write_text(header + yaml.safe_dump(data, sort_keys=False))
        for name, content in (files or {}).items():
            (self.workdir / name).parent.mkdir(parents=True, exist_ok=True)
            (self.workdir / name).write_text(content)

    def program(self):
        spec_path, stack, build_root = self.spec_path, self.stack, self.workdir / "build"

        def run() -> None:  # the program `pulumi up` runs, with its outputs
            sandstack_program(spec_path, stack=stack, build_root=build_root)

        return run

    def up(self, spec_text: str | None = None, files: dict[str, str] | None = None, **kwargs):
        if spec_text is not None:
            self.write(spec_text, files)
        guard = self.guarded()
        try:
            return self.harness.run(self.program(), secret_config={f"sandstack:{k}": v for k, v in
                                                                   self.secret_config.items()}, **kwargs)
        finally:
            if guard is not None:
                guard.cover(self.subnets())

    def guarded(self) -> LeakGuard | None:
        """This deployment's leak guard (testbed/leak_guard.py), opened at the first apply over its whole
        `subnet_pool` (every sandbox network is carved from it, so nothing starts unguarded) and checked when
        the harness is torn down: a packet it dropped fails the teardown. None on a harness without a daemon."""
        if not hasattr(self.harness.backend, "api"):
            return None
        if self.leak_guard is None:
            sweep_dead_leak_guards()
            self.leak_guard = LeakGuard(f"stack {self.stack}")
            self.harness.after_teardown(self.leak_guard.close)
        self.leak_guard.cover([self.subnet_pool, *self.subnet_pools()])
        return self.leak_guard

    def subnet_pools(self) -> list[str]:
        """Every host's `subnet_pool` in the written spec (a spec may set its own)."""
        data = yaml.safe_load(self.spec_path.read_text()) if self.spec_path.exists() else {}
        return [host["subnet_pool"] for host in ((data or {}).get("hosts") or {}).values()
                if isinstance(host, dict) and isinstance(host.get("subnet_pool"), str)]

    def subnets(self) -> list[str]:
        """The subnets of every network of this stack now (the egress network's comes from Docker)."""
        networks = self.harness.backend.api.networks(filters={"label": f"{LABEL_STACK}={self.stack}"})
        return [config["Subnet"] for network in networks
                for config in (network.get("IPAM") or {}).get("Config") or [] if config.get("Subnet")]

    def name(self, *parts: str) -> str:
        """Docker name of a stack object: host-level roles (egress network, gateway, guard) use the '_' form
        of `sandstack.plan.naming.infra_name`, pool objects the '-' form (`docker_name`)."""
        if parts == ("egress",):
            return egress_network_name(self.stack)
        if len(parts) == 1 and parts[0] in HOST_SERVICES:
            return infra_name(self.stack, parts[0])
        return docker_name(self.stack, *parts)

    def container(self, pool: str, index: int = 0) -> "docker_sdk.models.containers.Container":
        return docker_sdk.from_env().containers.get(self.name(pool, str(index)))


@dataclass
class SharedDeployment:
    """A module's deployed stack: its harness, the deployment and the first run's result."""

    harness: Harness
    deployment: Deployment
    result: RunResult
    label: str  # what the coverage table names as having applied the fields ("<module>::<deployment>")

    @property
    def stack(self) -> str:
        return self.deployment.stack

    def name(self, *parts: str) -> str:
        return self.deployment.name(*parts)

    def container(self, pool: str, index: int = 0):
        return self.deployment.container(pool, index)

    def proves(self, *fields: str) -> None:
        """`harness.proves(...)` for a test of this module, checked like the `docker_harness` fixture does:
        each field must have been applied to the engine by this module's deployment."""
        self.harness.proves(*fields)
        unapplied = [f for f in fields if self.label not in coverage.tests_using(f)]
        assert not unapplied, f"{self.label} never applied {unapplied} to the engine"


def _explain(failure: Exception) -> None:
    """A container that never became healthy is removed by the teardown: print its log and health checks first."""
    match = re.search(r"container ([0-9a-f]{12}) created but not completed", str(failure))
    if not match:
        return
    try:
        container = docker_sdk.from_env().containers.get(match[1])
        health = (container.attrs["State"].get("Health") or {}).get("Log") or []
        print(f"\n[deploy] {container.name}: state {container.attrs['State'].get('Status')}, "
              f"restarts {container.attrs.get('RestartCount')}\n[deploy] log:\n{container.logs(tail=40).decode()}"
              f"\n[deploy] health checks: {[(h.get('ExitCode'), h.get('Output', '')[-300:]) for h in health[-3:]]}")
    except Exception as error:  # diagnostics only: never hide the failure itself
        print(f"[deploy] no diagnostics for {match[1]}: {error}")


@contextlib.contextmanager
def shared_deployment(module_file: str, workdir: Path, spec_text: str, *, stack: str | None = None,
                      secret_config: dict | None = None,
                      files: dict[str, str] | None = None) -> Iterator[SharedDeployment]:
    """Deploys `spec_text` once for a whole test module and always tears it down, leaving nothing behind."""
    label = f"{Path(module_file).relative_to(Path(__file__).parents[1])}::<module deployment>"
    harness = Harness()
    named = {"stack": stack} if stack is not None else {}
    deployment = Deployment(harness, workdir, secret_config=dict(secret_config or {}), **named)
    try:
        # Field uses are recorded against PYTEST_CURRENT_TEST: name the module's deployment instead of
        # whichever test happens to set the module fixture up.
        previous = os.environ.get("PYTEST_CURRENT_TEST")
        os.environ["PYTEST_CURRENT_TEST"] = f"{label} (setup)"
        try:
            result = deployment.up(spec_text, files)
        except Exception as failure:
            _explain(failure)
            raise
        finally:
            if previous is None:
                os.environ.pop("PYTEST_CURRENT_TEST", None)
            else:
                os.environ["PYTEST_CURRENT_TEST"] = previous
        yield SharedDeployment(harness, deployment, result, label)
    finally:
        try:
            harness.teardown()  # raises LeakDetected if the deployment's leak guard dropped a packet
        finally:
            left = remaining(harness.backend.api, harness.session_id)
            host_left = clear_host_state(deployment.stack)
        assert not left, f"harness session {harness.session_id} left objects behind: {left}"
        assert not host_left, f"stack {deployment.stack} left host state behind: {host_left}"


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip()
