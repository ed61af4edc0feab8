"""A host's ingress, as plain values: the URL of every `exposure: url` port, and the Caddy container that routes
each URL's host name to its sandbox and port over the pool's network (docs/design/ingress.md).

Caddy joins each pool network that has url ports at a fixed address, which the guard opens to exactly those
ports of that pool's sandboxes (`sandstack.plan.network.guard_rules`); sandboxes cannot open connections to it.
Its published port is on a network of its own, so no pool network becomes routed and no sandbox port is
published.

With a runtime on the host, a request that finds no upstream wakes the site's sandbox (`Wake`): Caddy asks the
runtime's `GET /v1/wake?site=<host>&sandbox=<its sandbox>` over a unix socket in the runtime's configuration volume,
which the ingress mounts read-only (so an ingress added to a host changes none of the runtime's inputs, and the
runtime listens on no address of the ingress's network) and, once it answers 200, sends the request to the sandbox
again (docs/design/ondemand.md, "Waking on a URL request"). The site's sandbox travels with each request, written
here, so the runtime's configuration holds no sites: a url port, a replica's site or the domain changed reloads the
ingress alone.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from sandstack.plan.contract import CONFIG_DIR as RELOAD_DIR
from sandstack.plan.contract import INGRESS_RUNTIME_DIR, RUN_DIR, WAKE_SOCKET
from sandstack.plan.container import LogRotation, RunSettings, host_role
from sandstack.plan.naming import bridge_name, infra_name
from sandstack.plan.reload import SERVICE_SH, ConfigSet, Join
from sandstack.plan.runtime import ENV_WAKE_TOKEN
from sandstack.spec.envrefs import PUBLIC_HOSTNAME, url_variable
from sandstack.spec.models.hosts import Ingress
from sandstack.spec.contract import URL_AUTH_COOKIE, URL_AUTH_HEADER

USER = "65534:65534"  # nobody: Caddy needs no privilege to listen on its high ports inside the container
HTTPS_PORT = 8443  # inside the container; published on the host's `ingress.port`
HTTP_PORT = 8080  # inside; published on the host's port 80 only for ACME's HTTP challenge
CONFIG_DIR = "/config"  # tmpfs: Caddy's own files and the Caddyfile in force
ADMIN = "unix//tmp/caddy-admin.sock"  # Caddy's admin API, on a socket only this container reaches: reloads go there
# Caddy's certificates and local CA: a volume with ACME (the infra image makes the directory nobody's, and Docker
# gives a new volume its owner), else a tmpfs (the local CA signs again after a restart).
DATA_DIR = "/data"
TLS_DIR = f"{RUN_DIR}/tls"  # the uploaded certificate and key
MEMORY_MB = 128
CPUS = "0.5"
CADDYFILE_ENV = "SANDSTACK_CADDYFILE"  # the Caddyfile's item in its configuration (the CrossGuard pack reads it)
LISTEN_ITEM = "SANDSTACK_LISTEN"  # where it listens on the host (`<address>:<port>`): what the pack calls public
# Caddy runs as a child of this loop, which applies each configuration its reload container points `want` at
# (sandstack/plan/reload.py): the Caddyfile written beside the one in force and checked by Caddy's adapter, then
# swapped in and loaded through the admin socket (`caddy reload`: Caddy's zero-downtime config change, open
# connections kept), reported once Caddy took it. If Caddy ends, so does the container.
LOOP = r"""
set -u
caddy_pid="" applied="" refused=""
take() {  # $1: digest; Caddy runs with it afterwards, or the digest is refused and nothing changed
  cfg_item "$1" @ITEM@ >@DIR@/Caddyfile.new || { why="its Caddyfile cannot be read"; return 1; }
  if ! out=$(caddy adapt --config @DIR@/Caddyfile.new --adapter caddyfile 2>&1 >/dev/null); then
    why=$(printf '%s
' "$out" | grep -m 1 -i error || printf '%s
' "$out" | tail -n 1); return 1
  fi
  mv -f @DIR@/Caddyfile.new @DIR@/Caddyfile
  if [ -z "$caddy_pid" ]; then
    caddy run --config @DIR@/Caddyfile --adapter caddyfile & caddy_pid=$!
    for _ in $(seq 100); do [ -S /tmp/caddy-admin.sock ] && return 0; sleep 0.1; done
    why="Caddy did not start"; return 1
  fi
  out=$(caddy reload --config @DIR@/Caddyfile --adapter caddyfile --address @ADMIN@ 2>&1) && return 0
  why=$(printf '%s
' "$out" | grep -m 1 -i error || printf '%s
' "$out" | tail -n 1); return 1
}
while :; do
  cfg_follow sandstack-ingress
  [ -z "$caddy_pid" ] || kill -0 "$caddy_pid" 2>/dev/null || exit 1
  sleep 0.2
done
""".replace("@ITEM@", CADDYFILE_ENV).replace("@DIR@", CONFIG_DIR).replace("@ADMIN@", ADMIN)
ENTRYPOINT = SERVICE_SH + LOOP
# Healthy once Caddy listens on its HTTPS port (a config it cannot load never gets there): 0A is LISTEN.
HEALTH_TEST = ("CMD-SHELL", f"awk '$4 == \"0A\" && $2 ~ /:{HTTPS_PORT:04X}$/' /proc/net/tcp /proc/net/tcp6 | grep -q .")
TMPFS = {CONFIG_DIR: "rw,nosuid,nodev,noexec,size=4m,uid=65534,gid=65534", "/tmp": "rw,nosuid,nodev,noexec,size=8m"}
DATA_TMPFS = "rw,nosuid,nodev,noexec,size=16m,uid=65534,gid=65534"
# Healthy only once it has a configuration: `pulumi up` waits for its reload container instead.
RUN = host_role(HEALTH_TEST, LogRotation("10m", 5), wait=False)
# After a wake, how long Caddy keeps trying the sandbox's port (its service may start a little after the readiness
# probe passed), and how often.
RETRY_DURATION = "10s"
RETRY_INTERVAL = "250ms"
# After a wake, a request that may have had a body: any method but GET, HEAD and OPTIONS, or a Content-Length
# other than 0 (Caddy 2.6's CEL; `Transfer-Encoding` is not a header it can read, and a chunked GET is not matched).
SENT = ('!({http.request.method} in ["GET", "HEAD", "OPTIONS"]) || '
        '!({http.request.header.Content-Length} in ["", "0"])')
WOKE_RETRY = "sandbox woke: send the request again"
# One answer for every name that serves nothing now: a name under the domain no site has, a site whose sandbox is
# stopped or not made, a site whose session cannot be woken. Site names are predictable
# (`<port>-<pool>-<replica>.<domain>`): distinct answers told pools, replicas and live sessions apart.
NOT_RUNNING = "sandbox not running"


@dataclass(frozen=True)
class Wake:
    """The ingress's way to the host's runtime: a unix socket in the runtime's configuration volume, which the ingress
    mounts read-only (`upstream`); its network's fixed subnet; and the label the wake token is derived under (an HMAC
    of the host's runtime token: `sandstack.plan.tree.Secret`)."""

    subnet: ipaddress.IPv4Network
    token_label: str

    @property
    def upstream(self) -> str:
        """Where Caddy reaches the runtime: its socket, no address of any network."""
        return f"unix/{INGRESS_RUNTIME_DIR}/{WAKE_SOCKET}"

    @property
    def runtime_address(self) -> str:
        """The host's address on the ingress bridge (the network's gateway; the runtime does not listen there)."""
        return str(self.subnet[1])

    @property
    def ingress_address(self) -> str:
        """The ingress's fixed address on its network, the one source the guard lets reach the runtime."""
        return str(self.subnet[-2])

    @property
    def ip_range(self) -> str:
        """Where Docker picks any other address on the network: the first half, never the ingress's."""
        return str(next(self.subnet.subnets(prefixlen_diff=1)))


def wake_token_label(stack: str, host: str) -> str:
    return f"sandstack ingress-wake {stack}/{host}"


@dataclass(frozen=True)
class Site:
    host_name: str  # `<port>-<pool>-<replica>.<domain>`
    upstream: str  # the sandbox's container name, which Docker's DNS answers on the pool network
    port: int
    auth: bool = False  # `urls.auth: session`: the runtime checks the visitor's session token first


@dataclass(frozen=True)
class IngressPlan:
    stack: str
    spec: Ingress
    pools: tuple[tuple[str, str], ...]  # (pool, the ingress's fixed address on its network)
    sites: tuple[Site, ...]
    wake: Wake | None = None  # with a runtime on the host: a site without upstream wakes its sandbox
    joins: tuple[tuple[str, str], ...] = ()  # (Docker name, its address) of each url pool's network

    @property
    def container_name(self) -> str:
        return infra_name(self.stack, "ingress")

    @property
    def run(self) -> RunSettings:
        return RUN

    @property
    def data_volume(self) -> str:
        return infra_name(self.stack, "ingress-data")

    @property
    def network(self) -> str:
        return infra_name(self.stack, "ingress-net")

    @property
    def bridge(self) -> str:
        return bridge_name(self.stack, "ingress")

    @property
    def bind_ip(self) -> str:
        return "0.0.0.0" if self.spec.exposure == "public" else "127.0.0.1"

    @property
    def ports(self) -> tuple[tuple[int, int], ...]:
        """(inside, on the host): HTTPS, and HTTP for an ACME challenge."""
        return ((HTTPS_PORT, self.spec.port),) + (((HTTP_PORT, 80),) if self.spec.acme_email else ())

    @property
    def caddyfile(self) -> str:
        tls = ("" if self.spec.acme_email else
               f"\ttls {TLS_DIR}/cert.pem {TLS_DIR}/key.pem\n" if self.spec.tls else "\ttls internal\n")
        lines = ["{", f"\tadmin {ADMIN}", f"\thttps_port {HTTPS_PORT}", f"\thttp_port {HTTP_PORT}",
                 "\tskip_install_trust"]
        if self.spec.acme_email:
            lines.append(f"\temail {self.spec.acme_email}")
        else:
            lines.append("\tauto_https disable_redirects")
        lines.append("}")
        for site in self.sites:
            first, *rest = [*self._auth_lines(site), *self._proxy_lines(site)]
            lines += [f"https://{site.host_name} {{", tls + first, *rest, *self._wake_lines(site), "}"]
        if not self.spec.acme_email:
            # Any other name under the domain (an undeclared port, a sandbox that does not exist) gets the answer of a
            # site that serves nothing now, never a guess at an upstream. ACME cannot sign a wildcard over HTTP, so it
            # has no such site.
            lines += [f"https://*.{self.spec.domain} {{", tls + f'\trespond "{NOT_RUNNING}" 502', "}"]
        return "\n".join(lines) + "\n"

    def _auth_lines(self, site: Site) -> list[str]:
        """`urls.auth: session`: before anything else, the runtime is asked whether the visitor holds the token of the
        session bound to the site's sandbox (`GET /v1/url-auth`, sandstack.runtime.routes.url_auth; Caddy's
        `forward_auth` sends the visitor's headers, X-Forwarded-Uri among them, and no body). A 2xx lets the request
        through; any other answer (401, or the 303 that swaps a URL's token for a cookie) is the visitor's answer.
        The ingress's own token rides in Authorization, the visitor's own in a header, cookie or query parameter of
        its own. Before a wake, so no visitor without the token wakes a session."""
        if not site.auth or self.wake is None:
            return []
        return [f"\tforward_auth {self.wake.upstream} {{",
                f"\t\turi /v1/url-auth?site={{host}}&sandbox={site.upstream}",
                f'\t\theader_up Authorization "Bearer {{env.{ENV_WAKE_TOKEN}}}"',
                "\t}"]

    @staticmethod
    def _proxy_lines(site: Site) -> list[str]:
        """The sandbox's port; behind `urls.auth: session` the app never sees the visitor's token: its header goes,
        and the cookie is cut out of the Cookie header (the app's own cookies stay)."""
        if not site.auth:
            return [f"\treverse_proxy {site.upstream}:{site.port}"]
        return [f"\treverse_proxy {site.upstream}:{site.port} {{", *IngressPlan._strip_lines(site), "\t}"]

    @staticmethod
    def _strip_lines(site: Site) -> list[str]:
        if not site.auth:
            return []
        # Caddy 2.6 reads an empty replacement as no replacement (the pattern became the header's value): the
        # separator before the cookie is kept instead ("a=1; " is a valid Cookie header).
        return [f"\t\theader_up -{URL_AUTH_HEADER}", f'\t\theader_up Cookie "(^|;\\s*){URL_AUTH_COOKIE}=[^;]*" "$1"']

    def _wake_lines(self, site: Site) -> list[str]:
        """A site's error route when the proxy found no upstream (the sandbox stopped, hibernated, or not made):
        ask the runtime to wake the site's sandbox (`method` and `rewrite` change only the runtime's copy of the
        request; the site travels as a query parameter, the token from the container's environment, never from
        this text), and once it answers 200 serve the original request from the sandbox, trying its port for
        RETRY_DURATION. Any other answer (no session to wake: 409) is a 502 at once, nothing of the runtime's
        answer shown. A request that may carry a body (`SENT`) is not served after a wake but answered 503 with
        Retry-After: its body is gone (the failed first try at the sandbox closed it: Go's transport closes a
        request's body when a round trip fails, dial errors included), and sent on empty it would reach the
        sandbox truncated. Every error of this site is the proxy's (nothing else here fails), so no status matcher."""
        if self.wake is None:  # nothing to wake: the same answer as a name no site has
            return ["	handle_errors {", f'		respond "{NOT_RUNNING}" 502', "	}"]
        return ["	handle_errors {",
                f"		reverse_proxy {self.wake.upstream} {{",
                "			method GET",  # sent without the visitor's body, which is closed by now (wake.py)
                f"			rewrite /v1/wake?site={{host}}&sandbox={site.upstream}",
                f'			header_up Authorization "Bearer {{env.{ENV_WAKE_TOKEN}}}"',
                "			header_up -Cookie",
                "			@woke status 200",
                "			handle_response @woke {",
                f"				@sent expression `{SENT}`",
                "				header @sent Retry-After 1",
                f'				respond @sent "{WOKE_RETRY}" 503',
                f"				reverse_proxy {site.upstream}:{site.port} {{",
                *["	" + line for line in self._strip_lines(site)],
                f"					lb_try_duration {RETRY_DURATION}",
                f"					lb_try_interval {RETRY_INTERVAL}",
                "				}",
                "			}",
                "			handle_response {",
                f'				respond "{NOT_RUNNING}" 502',
                "			}",
                "		}",
                "	}"]

    @property
    def dns(self) -> list[str] | None:
        """Waking, Caddy looks up the name of a sandbox that is stopped or not made yet, which Docker's DNS does not
        know and would forward to the host's resolvers: without ACME (whose CA's name it needs), the ingress's
        lookups beyond the sandboxes' names go to its loopback, where nothing answers, never off the host."""
        return ["127.0.0.1"] if self.wake and not self.spec.acme_email else None

    @property
    def tmpfs(self) -> dict[str, str]:
        return {**TMPFS, **({} if self.spec.acme_email else {DATA_DIR: DATA_TMPFS})}

    @property
    def env(self) -> list[str]:
        return [f"XDG_DATA_HOME={DATA_DIR}", f"XDG_CONFIG_HOME={CONFIG_DIR}", f"HOME={CONFIG_DIR}",
                f"SANDSTACK_CONFIG_DIR={RELOAD_DIR}"]

    @property
    def config(self) -> ConfigSet:
        """Its Caddyfile and where it listens, and the url pools' networks its reload container joins it to (at the
        address the guard opens to their url ports)."""
        return ConfigSet("ingress", ((CADDYFILE_ENV, self.caddyfile), (LISTEN_ITEM, f"{self.bind_ip}:{self.spec.port}")),
                         tuple(Join(network, address) for network, address in self.joins))


def public_hostname(pool: str, index: int, domain: str) -> str:
    return f"{pool}-{index}.{domain}"


def url_of(ingress: Ingress, pool: str, index: int, port: int) -> str:
    suffix = "" if ingress.port == 443 else f":{ingress.port}"
    return f"https://{port}-{public_hostname(pool, index, ingress.domain)}{suffix}"


def url_env(ingress: Ingress | None, pool: str, index: int, ports) -> dict[str, str]:
    """What a sandbox with url ports learns of its URLs: its public host name, and SANDSTACK_URL_<NAME> per url port.
    A sandbox without one has no URL, and learns nothing: an ingress added to its host leaves it running."""
    if ingress is None or not any(p.exposure == "url" for p in ports):
        return {}
    env = {PUBLIC_HOSTNAME: public_hostname(pool, index, ingress.domain)}
    for p in ports:
        if p.exposure == "url":
            env[url_variable(p.port, p.name)] = url_of(ingress, pool, index, p.port)
    return env
