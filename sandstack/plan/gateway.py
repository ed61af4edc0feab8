"""The egress gateway's container, as plain values: its squid.conf (sandstack.plan.squid), the script that
prepares and starts squid, its place on each gateway pool's network, and its bounds."""

from __future__ import annotations

from dataclasses import dataclass

from sandstack.plan import front
from sandstack.plan.container import LogRotation, RunSettings, host_role
from sandstack.plan.contract import CONFIG_DIR, cgroup_parent
from sandstack.plan.naming import PREFIX, infra_name
from sandstack.plan.network import GATEWAY_ALIAS
from sandstack.plan.reload import SERVICE_SH, ConfigSet, Join
from sandstack.plan.squid import (ACCESS_LOG, ERROR_DIRECTORY, NAME_HELPER, PROFILE_HELPER, PROFILES_DIR,
                                  REFUSALS_HELPER, REFUSALS_HOST, REFUSALS_PAGE, REFUSALS_PREFIX, SELF_ADDRESSES,
                                  GatewayPool, render)

# Debian's squid error templates, one file per error name (a symlink into squid-langpack).
SQUID_TEMPLATES = "/usr/share/squid/errors/templates"
# Squid's own pages name the sandbox's address, the gateway's host name and squid's version; this one
# names only the error (`%c`, e.g. ERR_ACCESS_DENIED).
ERROR_PAGE = "The sandstack gateway refused this request or could not complete it: %c"
# Once, before squid starts: an error page for every template name squid may load (one it does not find here it
# loads from the stock templates). Every step must succeed: a missing page would quietly undo a refusal, so the
# gateway does not start instead.
PREPARE = (
    f"mkdir -p {ERROR_DIRECTORY}"
    f" && for t in {SQUID_TEMPLATES}/ERR_*; do printf '%s\\n' '{ERROR_PAGE}' > {ERROR_DIRECTORY}/${{t##*/}}"
    " || exit 1; done"
    f" && test -s {ERROR_DIRECTORY}/ERR_ACCESS_DENIED"
    # The answer to a setup step asking what was refused it (sandstack.plan.squid.REFUSALS_HOST): the helper's message.
    f" && printf '%s\\n' '{REFUSALS_PREFIX} %o' > {ERROR_DIRECTORY}/{REFUSALS_PAGE}"
    # TLS error descriptions (no names, no addresses), which squid-openssl loads from the same directory;
    # without them it only logs an error, so an image that lacks them still starts.
    f" && {{ [ ! -e {SQUID_TEMPLATES}/error-details.txt ]"
    f" || cp {SQUID_TEMPLATES}/error-details.txt {ERROR_DIRECTORY}/; }}"
)
# Processes and threads of the gateway (squid, its helpers, HAProxy's master and workers, `tail`): written by the
# host guard into the gateway's cgroup parent, as for sandboxes (pulumi-docker has no pids-limit input).
GATEWAY_PIDS = 512
LOG_DIR = "/var/log/squid"
CACHE_LOG = f"{LOG_DIR}/cache.log"
# HAProxy's master writes each worker's start there: one "Loading success." or "Loading failure!" per (re)load.
FRONT_LOG = "/tmp/haproxy.log"
# Squid runs as a child of this loop, behind HAProxy (sandstack.plan.front), and the loop applies each configuration
# its reload container points `want` at (sandstack/plan/reload.py): written beside the one in force, both files
# checked (`squid -k parse`, `haproxy -c`), then swapped in: squid told to reconfigure (SIGHUP; it keeps its
# connections), reported once it has reopened every port (its cache log says so, one line per port); then, only when
# the pools' ports changed, HAProxy reloaded (SIGUSR2 to its master: the new worker takes the listening sockets of
# the old one, no port closes), reported once its master says the load succeeded. If it did not, squid is given its
# previous file back, so the set in force stays whole. Before each: its own addresses, which Docker picks and the
# reload container's network joins change (`hostname -I`: all but loopback), one a line for the `sandstack_self`
# acl; an empty list would quietly undo a refusal, so it is a refusal. `tail` copies the access log to stdout so
# `docker logs` shows it (squid cannot reopen /dev/stdout once it is not root). If squid or HAProxy ends, so does
# the container.
LOOP = r"""
set -u
touch @ACCESS_LOG@ @CACHE_LOG@ @FRONT_LOG@ && { tail -n 0 -F @ACCESS_LOG@ & }
squid_pid="" front_pid="" applied="" refused=""
accepting() { grep -c 'Accepting HTTP Socket connections' @CACHE_LOG@; }
loads() { grep -c -E 'Loading (success|failure)' @FRONT_LOG@; }
first_line() { printf '%s\n' "$1" | grep -m 1 -E "$2" || printf '%s\n' "$1" | tail -n 1; }
squid_take() {  # $1: the file to run; squid runs with it afterwards
  ports=$(grep -c '^http_port ' "$1")
  before=$(accepting)
  mv -f "$1" /tmp/squid.conf
  if [ -z "$squid_pid" ]; then squid -N -f /tmp/squid.conf & squid_pid=$!; else kill -HUP "$squid_pid"; fi
  # A bound on waiting, not a measure: a first start on a busy host took over 10 s. Squid exits on a port it
  # cannot open, so a real refusal ends the wait at once.
  for _ in $(seq 600); do
    [ "$(accepting)" -ge $((before + ports)) ] && return 0
    kill -0 "$squid_pid" 2>/dev/null ||
      { why="squid exited: $(first_line "$(tail -n 20 @CACHE_LOG@)" 'FATAL')"; return 1; }
    sleep 0.1
  done
  why="squid did not reopen its ports within 60 s"; return 1
}
front_take() {  # HAProxy runs /tmp/haproxy.cfg.new afterwards, or the one before and a refusal
  before=$(loads)
  cp -f /tmp/haproxy.cfg /tmp/haproxy.cfg.old 2>/dev/null || :
  mv -f /tmp/haproxy.cfg.new /tmp/haproxy.cfg
  if [ -z "$front_pid" ]; then haproxy -W -f /tmp/haproxy.cfg >>@FRONT_LOG@ 2>&1 & front_pid=$!
  else kill -USR2 "$front_pid"; fi
  for _ in $(seq 600); do [ "$(loads)" -gt "$before" ] && break; sleep 0.1; done  # a bound, as squid's
  grep -E 'Loading (success|failure)' @FRONT_LOG@ | tail -n 1 | grep -q success && return 0
  why="haproxy did not load its configuration: $(first_line "$(tail -n 20 @FRONT_LOG@)" 'ALERT')"
  [ -e /tmp/haproxy.cfg.old ] && mv -f /tmp/haproxy.cfg.old /tmp/haproxy.cfg
  return 1
}
take() {  # $1: digest; squid and HAProxy run with it afterwards, or the digest is refused and nothing changed
  cfg_item "$1" SQUID_CONF >/tmp/squid.conf.new || { why="its squid.conf cannot be read"; return 1; }
  cfg_item "$1" FRONT_CONF >/tmp/haproxy.cfg.new || { why="its haproxy.cfg cannot be read"; return 1; }
  hostname -I | tr -s ' ' '
' | grep . >@SELF@.new || { why="the gateway has no address"; return 1; }
  mv -f @SELF@.new @SELF@
  if ! out=$(squid -k parse -f /tmp/squid.conf.new 2>&1); then
    why=$(first_line "$out" 'FATAL|ERROR|Bungled'); return 1
  fi
  if ! out=$(haproxy -c -f /tmp/haproxy.cfg.new 2>&1); then
    why="haproxy: $(first_line "$out" 'ALERT')"; return 1
  fi
  cp -f /tmp/squid.conf /tmp/squid.conf.old 2>/dev/null || :
  squid_take /tmp/squid.conf.new || return 1
  cmp -s /tmp/haproxy.cfg.new /tmp/haproxy.cfg && return 0
  front_take && return 0
  [ -e /tmp/squid.conf.old ] && { held=$why; squid_take /tmp/squid.conf.old; why=$held; }
  return 1
}
while :; do
  cfg_follow sandstack-gateway
  [ -z "$squid_pid" ] || kill -0 "$squid_pid" 2>/dev/null || exit 1
  [ -z "$front_pid" ] || kill -0 "$front_pid" 2>/dev/null || exit 1
  sleep 0.2
done
""".replace("@ACCESS_LOG@", ACCESS_LOG).replace("@CACHE_LOG@", CACHE_LOG).replace("@SELF@", SELF_ADDRESSES) \
    .replace("@FRONT_LOG@", FRONT_LOG)
# The network profiles' external acl helper (sandstack.plan.squid): one line per request, `<source address> <pool>
# <profile> <start>`; OK when the file the runtime wrote for the address says `<pool> <profile>`, or when there is
# none and the profile is the start one (an empty file: none). Builtins only: no process per request. A file naming
# another pool matches no profile of this one, so the request is refused (a stale file never opens anything).
PROFILE_HELPER_SH = r"""while read -r src pool profile start; do
  now="$pool $start"
  [ -r "@DIR@/$src" ] && { read -r now <"@DIR@/$src" || :; }
  if [ "$now" = "$pool $profile" ]; then echo OK; else echo ERR; fi
done
""".replace("@DIR@", PROFILES_DIR)
# The sandbox-name helper (sandstack.plan.squid.NAME_HELPER): `<address> <the pool's template>` in (squid appends the
# acl's argument), `OK tag=<container name>` out (Docker's resolver answers `<container>.<network>`; the address
# itself when nothing answers); a container that is none of sandstack's, a setup build's RUN container (Docker names
# it), `OK tag=setup:<template>:<its name>`. Never ERR: the log names the request either way.
NAME_HELPER_SH = r"""while read -r src template _; do
  name=$(getent hosts "$src" | { read -r _ n _ && printf '%s' "${n%%.*}"; })
  case "$name" in
    "" | @PREFIX@-*) echo "OK tag=${name:-$src}" ;;
    *) echo "OK tag=setup:$template:$name" ;;
  esac
done
""".replace("@PREFIX@", PREFIX)
# The refusals helper (sandstack.plan.squid.REFUSALS_HELPER): `<address> /<since>` in (url-quoted), `OK
# message="<host:port> ..."` out: the distinct destinations its access log refused that address as a setup's
# (`sandbox=setup:…`, TCP_DENIED) at or after `since` (UTC, to the second), in its last MiB; `-` for none. Not by the
# container's name: the name helper's answers are cached 5 s, and a build's next RUN container often takes its
# predecessor's address, so its first lines may carry the predecessor's name; the time tells them apart (one address,
# one container at a time). Only to a requester Docker's resolver names and not as one of sandstack's containers (a
# build's RUN container): a sandbox gets `-`, whatever it asks, and never a sandbox's line.
REFUSALS_HELPER_SH = r"""while read -r src path _; do
  since=${path#/} && since=${since#%2[Ff]}  # squid may escape the path's '/' and ':' (its helper input is url-quoted)
  name=$(getent hosts "$src" | { read -r _ n _ && printf '%s' "${n%%.*}"; })
  case "$name:$since" in
    :* | @PREFIX@-* | *: | *:*[!0-9T:%Aa-]*) echo 'OK message="-"'; continue ;;
  esac
  list=$(tail -c 1048576 @ACCESS_LOG@ | awk -v src="$src" -v name="$name" -v since="$since" -v asked="@ASKED@" '
    BEGIN { gsub(/%3[Aa]/, ":", since) }
    $1 >= since && index($0, " verdict=TCP_DENIED ") && index($0, " client=" src " ") && index($0, " sandbox=setup:") {
      for (i = 2; i <= NF; i++) if (substr($i, 1, 5) == "dest=") {
        d = substr($i, 6)
        if (index(d, asked ":") != 1 && !(d in seen)) { seen[d] = 1; out = out (out == "" ? "" : " ") d }
      }
    }
    END { print (out == "" ? "-" : out) }')
  echo "OK message=\"$list\""
done
""".replace("@PREFIX@", PREFIX).replace("@ACCESS_LOG@", ACCESS_LOG).replace("@ASKED@", REFUSALS_HOST)
WRITE_HELPER = (f"cat >{PROFILE_HELPER} <<'SANDSTACK_PROFILE' || exit 1\n{PROFILE_HELPER_SH}SANDSTACK_PROFILE\n"
                f"cat >{NAME_HELPER} <<'SANDSTACK_NAME' || exit 1\n{NAME_HELPER_SH}SANDSTACK_NAME\n"
                f"cat >{REFUSALS_HELPER} <<'SANDSTACK_REFUSALS' || exit 1\n{REFUSALS_HELPER_SH}SANDSTACK_REFUSALS\n")
ENTRYPOINT = SERVICE_SH + PREPARE + " || exit 1\n" + WRITE_HELPER + LOOP
USER = "proxy"
MEMORY_MB = 256
CPUS = "1"
TMPFS = {"/tmp": "rw,nosuid,nodev,size=16m"}
HEALTH_TEST = ("CMD", "squid", "-k", "check", "-f", "/tmp/squid.conf")
# Engine API 1.48+ picks a container's default route by this priority; the egress network gets it.
OUTBOUND_GW_PRIORITY = 1000
# `docker logs` shows the access log too: it keeps more of it than the guard and logger keep of theirs. Healthy only
# once it has a configuration: `pulumi up` waits for its reload container instead.
RUN = host_role(HEALTH_TEST, LogRotation("10m", 5), destroy_grace_seconds=10, wait=False)


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
    def squid_conf(self) -> str:
        return render(self.stack, self.host, list(self.pools))

    @property
    def front_conf(self) -> str:
        return front.render(self.stack, self.host, [(p.pool, p.port) for p in self.pools])

    @property
    def env(self) -> list[str]:
        return [f"SANDSTACK_CONFIG_DIR={CONFIG_DIR}"]

    @property
    def config(self) -> ConfigSet:
        """Its squid.conf and HAProxy's configuration, and the pool networks the reload container joins it to (at the address the guard opens,
        with the alias its sandboxes name their proxy by)."""
        return ConfigSet("gateway", (("SQUID_CONF", self.squid_conf), ("FRONT_CONF", self.front_conf)),
                         tuple(Join(p.network_name, p.address, (GATEWAY_ALIAS,)) for p in self.pools))


def plan_gateway(stack: str, host: str, pools: list[GatewayPool], resolver: str | None = None) -> GatewayPlan | None:
    """The host's gateway, or None when no pool on it egresses through one."""
    if not pools:
        return None
    return GatewayPlan(stack, host, tuple(sorted(pools, key=lambda p: p.pool)), resolver)
