"""The host's connection logger and logging resolver, as plain values, in the host's network namespace: a small
program (components/assets/connlog.py, on the infra image's Python) takes every new outbound connection of a
`protocols: any` pool from the NFQUEUE queue the guard's rules hold it in, writes its line and only then lets it
pass (fail closed); a dnsmasq per logged pool, which it runs, answers its lookups on its bridge's address as
sandstack/plan/resolver.py says, one line per query (docs/design/egress-log.md). Both logs rotate by size. The
resolvers and the pools' sources are its configuration, taken in place (sandstack/plan/reload.py)."""

from __future__ import annotations

from dataclasses import dataclass

from sandstack.plan.container import LogRotation, RunSettings, host_role
from sandstack.plan.contract import CONFIG_DIR
from sandstack.plan.reload import ConfigSet
from sandstack.plan.naming import infra_name
from sandstack.plan.network import LOGGED_MARK
from sandstack.plan.package_files import CONNECTION_LOGGER_SOURCE

LOG_DIR = "/var/log/sandstack"
LOG_FILE = f"{LOG_DIR}/connections.log"
DNS_LOG_DIR = f"{LOG_DIR}/dns"  # a file per pool, `<pool>.log`
# NET_ADMIN to bind the queue in the host's network namespace; NET_BIND_SERVICE for the resolver's port 53.
CAPABILITIES = ("NET_ADMIN", "NET_BIND_SERVICE")
MEMORY_MB = 32
CPUS = "0.25"
TMPFS = {"/tmp": "rw,nosuid,nodev,noexec,size=1m"}
# Docker's log of the container holds only the logger's own messages; the connections go to the volume.
LOGS = LogRotation("1m", 2)
# Rotation of the connection log and of each resolver's log (size-bounded: at most KEEP older files beside each).
LOG_MAX_BYTES = 16 * 1024 * 1024
LOG_KEEP = 3
# The connection log's writer and rotator, and the resolvers' keeper (components/assets/connlog.py): PID 1.
PROGRAM = CONNECTION_LOGGER_SOURCE.read_text()


@dataclass(frozen=True)
class Resolver:
    pool: str
    address: str  # the pool's bridge address, where its sandboxes send their lookups
    options: tuple[str, ...]  # dnsmasq options: what it forwards and refuses (sandstack/plan/resolver.py)


@dataclass(frozen=True)
class LoggerPlan:
    stack: str
    group: int  # the NFQUEUE queue the guard's rules hold new connections in (network.log_queue)
    pools: tuple[str, ...]  # the pools whose connections it logs (each line's prefix `pool=<name>`)
    resolvers: tuple[Resolver, ...] = ()  # a logging resolver per logged pool
    upstream: tuple[str, ...] = ()  # the host's `dns_upstream`; empty: its /etc/resolv.conf's nameservers
    sources: tuple[tuple[str, str], ...] = ()  # (pool, subnet) of each logged pool: which pool a line is about

    @property
    def container_name(self) -> str:
        return infra_name(self.stack, "logger")

    @property
    def log_volume(self) -> str:
        return infra_name(self.stack, "connections")

    @property
    def env(self) -> list[str]:
        """What it is told at its start: nothing that changes with pools (those are its configuration)."""
        return [f"SANDSTACK_QUEUE={self.group}", f"SANDSTACK_LOGGED_MARK={LOGGED_MARK.split('/')[0]}",
                f"SANDSTACK_CONNECTION_LOG={LOG_FILE}", f"SANDSTACK_DNS_LOG_DIR={DNS_LOG_DIR}",
                f"SANDSTACK_LOG_MAX_BYTES={LOG_MAX_BYTES}", f"SANDSTACK_LOG_KEEP={LOG_KEEP}",
                f"SANDSTACK_CONFIG_DIR={CONFIG_DIR}"]

    @property
    def config(self) -> ConfigSet:
        """Its resolvers and the pools' sources, taken in place (components/assets/connlog.py `Config`)."""
        return ConfigSet("logger", (
            ("SOURCES", "\n".join(f"{pool} {subnet}" for pool, subnet in self.sources)),
            ("RESOLVERS", "\n".join(" ".join((r.pool, r.address, *r.options)) for r in self.resolvers)),
            ("DNS_UPSTREAM", " ".join(self.upstream)),
        ))

    @property
    def command(self) -> list[str]:
        return ["python3", "-c", PROGRAM]

    @property
    def run(self) -> RunSettings:
        return host_role(self.health_test, LOGS)

    @property
    def health_test(self) -> tuple[str, ...]:
        """Healthy: the connection log exists and the logger holds its queue (the kernel's list of bound queues, the
        queue number right-aligned). Its resolvers are its configuration's: its reload container waits for them."""
        return ("CMD-SHELL", f"test -f {LOG_FILE} && grep -Eq '^ *{self.group} ' /proc/net/netfilter/nfnetlink_queue")
