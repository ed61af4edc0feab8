"""The egress gateway's container, as plain values: its squid.conf (sandstack.plan.squid), the script that
prepares and starts squid, its place on each gateway pool's network, and its bounds."""

from __future__ import annotations

from dataclasses import dataclass

from sandstack.plan.container import LogRotation, RunSettings, host_role
from sandstack.plan.contract import cgroup_parent
from sandstack.plan.naming import infra_name
from sandstack.plan.squid import ACCESS_LOG, ERROR_DIRECTORY, SELF_ADDRESSES, GatewayPool, render

# Debian's squid error templates, one file per error name (a symlink into squid-langpack).
SQUID_TEMPLATES = "/usr/share/squid/errors/templates"
# Squid's own pages name the sandbox's address, the gateway's host name and squid's version; this one
# names only the error (`%c`, e.g. ERR_ACCESS_DENIED).
ERROR_PAGE = "The sandstack gateway refused this request or could not complete it: %c"
# Before squid starts: its config; its own addresses, which Docker picks (`hostname -I`: all but
# loopback, refused apart, and IPv6 link-local), one a line for the `sandstack_self` acl; and an error
# page for every template name squid may load (one it does not find here it loads from the stock
# templates). Every step must succeed: an empty address list or a missing page would quietly undo a
# refusal, so the gateway does not start instead.
PREPARE = (
    'printf "%s\\n" "$SANDSTACK_SQUID_CONF" > /tmp/squid.conf'
    f" && hostname -I | tr -s ' ' '\\n' > {SELF_ADDRESSES} && grep -q . {SELF_ADDRESSES}"
    f" && mkdir -p {ERROR_DIRECTORY}"
    f" && for t in {SQUID_TEMPLATES}/ERR_*; do printf '%s\\n' '{ERROR_PAGE}' > {ERROR_DIRECTORY}/${{t##*/}}"
    " || exit 1; done"
    f" && test -s {ERROR_DIRECTORY}/ERR_ACCESS_DENIED"
    # TLS error descriptions (no names, no addresses), which squid-openssl loads from the same directory;
    # without them it only logs an error, so an image that lacks them still starts.
    f" && {{ [ ! -e {SQUID_TEMPLATES}/error-details.txt ]"
    f" || cp {SQUID_TEMPLATES}/error-details.txt {ERROR_DIRECTORY}/; }}"
)
# Processes and threads of the gateway (squid, its helpers, `tail`): written by the host guard into the
# gateway's cgroup parent, as for sandboxes (pulumi-docker has no pids-limit input).
GATEWAY_PIDS = 512
# Squid runs in the foreground as the container's main process; `tail` copies the access log to
# stdout so `docker logs` shows it (squid cannot reopen /dev/stdout once it is not root).
ENTRYPOINT = (
    PREPARE
    + f" && touch {ACCESS_LOG} && {{ tail -n 0 -F {ACCESS_LOG} & }}"
    + " && exec squid -N -f /tmp/squid.conf"
)
USER = "proxy"
MEMORY_MB = 256
CPUS = "1"
TMPFS = {"/tmp": "rw,nosuid,nodev,size=16m"}
LOG_DIR = "/var/log/squid"
HEALTH_TEST = ("CMD", "squid", "-k", "check", "-f", "/tmp/squid.conf")
# Engine API 1.48+ picks a container's default route by this priority; the egress network gets it.
OUTBOUND_GW_PRIORITY = 1000
# `docker logs` shows the access log too: it keeps more of it than the guard and logger keep of theirs.
RUN = host_role(HEALTH_TEST, LogRotation("10m", 5), destroy_grace_seconds=10)


@dataclass(frozen=True)
class GatewayPlan:
    stack: str
    host: str
    pools: tuple[GatewayPool, ...]  # sorted by pool name
    # The host's logging resolver for the gateway, on the egress network's bridge address: Docker's resolver in
    # the gateway answers the names of containers and sends every other lookup there, never to the host's own.
    resolver: str | None = None

    @property
    def container_name(self) -> str:
        return infra_name(self.stack, "gateway")

    @property
    def run(self) -> RunSettings:
        return RUN

    @property
    def log_volume(self) -> str:
        return infra_name(self.stack, "gateway-log")

    @property
    def cgroup_parent(self) -> str:
        return cgroup_parent(self.container_name)

    @property
    def config(self) -> str:
        return render(self.stack, self.host, list(self.pools))

    @property
    def env(self) -> list[str]:
        return [f"SANDSTACK_SQUID_CONF={self.config}"]


def plan_gateway(stack: str, host: str, pools: list[GatewayPool], resolver: str | None = None) -> GatewayPlan | None:
    """The host's gateway, or None when no pool on it egresses through one."""
    if not pools:
        return None
    return GatewayPlan(stack, host, tuple(sorted(pools, key=lambda p: p.pool)), resolver)
