"""The host's connection logger, as plain values: ulogd2 (from Debian, in the infra image) in the host's network
namespace, reading the NFLOG group the guard's rules send every new outbound connection of a `protocols: any`
pool to, and writing one line per connection to a volume (docs/design/egress-log.md)."""

from __future__ import annotations

from dataclasses import dataclass

from sandstack.plan.naming import infra_name

LOG_DIR = "/var/log/sandstack"
LOG_FILE = f"{LOG_DIR}/connections.log"
DNS_LOG_FILE = f"{LOG_DIR}/dns.log"
# NET_ADMIN to bind the NFLOG group in the host's network namespace; NET_BIND_SERVICE for the resolver's port 53.
CAPABILITIES = ("NET_ADMIN", "NET_BIND_SERVICE")
MEMORY_MB = 32
CPUS = "0.25"
TMPFS = {"/tmp": "rw,nosuid,nodev,noexec,size=1m"}
HEALTH_TEST = ("CMD-SHELL", f"test -f {LOG_FILE} && pgrep -x ulogd >/dev/null && pgrep -x dnsmasq >/dev/null")
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
touch "$SANDSTACK_DNS_LOG"
# The logging resolver: one query a line, on each logged pool's bridge address as its bridge appears. It keeps
# its ids (empty --user/--group: it holds no capability to change them); if it ends, the container ends (PID 1 is ulogd) and
# Docker's restart policy brings both back. Special-use names (RFC 6761: .test, .invalid, .localhost,
# .example) are answered here and never sent upstream.
( dnsmasq --keep-in-foreground --user= --group= --pid-file=/tmp/dnsmasq.pid --bind-dynamic --no-hosts \
    --log-queries=extra --log-facility="$SANDSTACK_DNS_LOG" --except-interface=lo \
    --local=/test/ --local=/invalid/ --local=/localhost/ --local=/example/ \
    $(for a in $SANDSTACK_RESOLVER_ADDRESSES; do echo "--listen-address=$a"; done)
  kill -TERM 1 ) &
exec ulogd -c /tmp/ulogd.conf
"""


@dataclass(frozen=True)
class LoggerPlan:
    stack: str
    group: int
    pools: tuple[str, ...]  # the pools whose connections it logs (each line's prefix `pool=<name>`)
    resolvers: tuple[str, ...] = ()  # the bridge addresses its resolver answers those pools on

    @property
    def container_name(self) -> str:
        return infra_name(self.stack, "logger")

    @property
    def log_volume(self) -> str:
        return infra_name(self.stack, "connections")

    @property
    def env(self) -> list[str]:
        return [f"SANDSTACK_NFLOG_GROUP={self.group}", f"SANDSTACK_CONNECTION_LOG={LOG_FILE}",
                f"SANDSTACK_DNS_LOG={DNS_LOG_FILE}", "SANDSTACK_RESOLVER_ADDRESSES=" + " ".join(self.resolvers)]
