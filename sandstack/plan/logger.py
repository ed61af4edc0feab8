"""The host's connection logger and logging resolver, as plain values, in the host's network namespace: ulogd2
(from Debian, in the infra image) reads the NFLOG group the guard's rules send every new outbound connection of a
`protocols: any` pool to and writes one line per connection; a dnsmasq per logged pool answers its lookups on its
bridge's address as sandstack/plan/resolver.py says, one line per query (docs/design/egress-log.md)."""

from __future__ import annotations

from dataclasses import dataclass

from sandstack.plan.container import LogRotation, RunSettings, host_role
from sandstack.plan.naming import infra_name

LOG_DIR = "/var/log/sandstack"
LOG_FILE = f"{LOG_DIR}/connections.log"
DNS_LOG_DIR = f"{LOG_DIR}/dns"  # a file per pool, `<pool>.log`
# NET_ADMIN to bind the NFLOG group in the host's network namespace; NET_BIND_SERVICE for the resolver's port 53.
CAPABILITIES = ("NET_ADMIN", "NET_BIND_SERVICE")
MEMORY_MB = 32
CPUS = "0.25"
TMPFS = {"/tmp": "rw,nosuid,nodev,noexec,size=1m"}
# Docker's log of the container holds only ulogd's own messages; the connections go to the volume.
LOGS = LogRotation("1m", 2)
# ulogd's plugins live in an architecture's directory: found at start, and the configuration written then.
# The stack: packets from NFLOG, decoded (BASE), interface names (IFINDEX), addresses as text (IP2STR), one
# iptables-LOG-style line each (PRINTPKT) with its time, in a file (LOGEMU).
ENTRYPOINT = r"""
set -e
dir=$(dirname "$(ls /usr/lib/*/ulogd/ulogd_inppkt_NFLOG.so | head -n 1)")
{
  echo '[global]'
  echo 'logfile="stdout"'
  echo 'loglevel=3'
  for p in inppkt_NFLOG raw2packet_BASE filter_IFINDEX filter_IP2STR filter_PRINTPKT output_LOGEMU; do
    echo "plugin=\"$dir/ulogd_$p.so\""
  done
  echo 'stack=log1:NFLOG,base1:BASE,ifi1:IFINDEX,ip2str1:IP2STR,print1:PRINTPKT,emu1:LOGEMU'
  echo '[log1]'
  echo "group=$SANDSTACK_NFLOG_GROUP"
  echo '[emu1]'
  echo "file=\"$SANDSTACK_CONNECTION_LOG\""
  echo 'sync=1'
} > /tmp/ulogd.conf
touch "$SANDSTACK_CONNECTION_LOG"
mkdir -p "$SANDSTACK_DNS_LOG_DIR"
# The logging resolvers: one dnsmasq per logged pool (a line "<pool> <address> <option>..." each), on the pool's
# bridge address as its bridge appears, one query a log line. Each keeps its ids (empty --user/--group: it holds no
# capability to change them); if one ends, the container ends (PID 1 is ulogd) and Docker's restart policy brings
# all back. @UPSTREAM@ in an option stands for each upstream server: the host's declared ones, or its own.
upstreams=${SANDSTACK_DNS_UPSTREAM:-$(awk '$1 == "nameserver" { print $2 }' /etc/resolv.conf)}
set -f  # options hold '*' and '#', never file names
while read -r pool address options; do
  [ -n "$pool" ] || continue
  args=""
  for o in $options; do
    case $o in
      *@UPSTREAM@) for u in $upstreams; do args="$args ${o%@UPSTREAM@}$u"; done ;;
      *) args="$args $o" ;;
    esac
  done
  ( dnsmasq --keep-in-foreground --user= --group= --pid-file="/tmp/dnsmasq-$pool.pid" --bind-dynamic --no-hosts \
      --no-resolv --except-interface=lo --listen-address="$address" --log-queries=extra \
      --log-facility="$SANDSTACK_DNS_LOG_DIR/$pool.log" $args
    kill -TERM 1 ) &
done <<RESOLVERS
$SANDSTACK_RESOLVERS
RESOLVERS
exec ulogd -c /tmp/ulogd.conf
"""


@dataclass(frozen=True)
class Resolver:
    pool: str
    address: str  # the pool's bridge address, where its sandboxes send their lookups
    options: tuple[str, ...]  # dnsmasq options: what it forwards and refuses (sandstack/plan/resolver.py)


@dataclass(frozen=True)
class LoggerPlan:
    stack: str
    group: int
    pools: tuple[str, ...]  # the pools whose connections it logs (each line's prefix `pool=<name>`)
    resolvers: tuple[Resolver, ...] = ()  # a logging resolver per logged pool
    upstream: tuple[str, ...] = ()  # the host's `dns_upstream`; empty: its /etc/resolv.conf's nameservers

    @property
    def container_name(self) -> str:
        return infra_name(self.stack, "logger")

    @property
    def log_volume(self) -> str:
        return infra_name(self.stack, "connections")

    @property
    def env(self) -> list[str]:
        lines = "\n".join(" ".join((r.pool, r.address, *r.options)) for r in self.resolvers)
        return [f"SANDSTACK_NFLOG_GROUP={self.group}", f"SANDSTACK_CONNECTION_LOG={LOG_FILE}",
                f"SANDSTACK_DNS_LOG_DIR={DNS_LOG_DIR}", f"SANDSTACK_RESOLVERS={lines}",
                "SANDSTACK_DNS_UPSTREAM=" + " ".join(self.upstream)]

    @property
    def run(self) -> RunSettings:
        return host_role(self.health_test, LOGS)

    @property
    def health_test(self) -> tuple[str, ...]:
        """Healthy: the connection log exists, ulogd runs and every pool's resolver does."""
        return ("CMD-SHELL", f"test -f {LOG_FILE} && pgrep -x ulogd >/dev/null && "
                             f"[ \"$(pgrep -xc dnsmasq)\" -ge {len(self.resolvers)} ]")
