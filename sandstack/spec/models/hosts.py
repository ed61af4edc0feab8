"""Docker hosts: where sandboxes run, how to reach the daemon, and what fits on it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import StringConstraints

from sandstack.spec.access import AS_FIELDS, NEVER, loosens
from sandstack.spec import changes
from sandstack.spec.changes import IN_INGRESS_TLS, INGRESS_HOST, PROVIDER, RUNTIME_HOST, URL_PORTS, Effect
from sandstack.spec.models.base import (ConfigKey, Cpus, ImageRef, LabelKey, Name, Platform, Size, StrictModel,
                                         field, text)
from sandstack.spec.contract import REGISTRY_URL_PATTERN, REPOSITORY_PATTERN
from sandstack.spec.models.network import NETWORK_ROLES
from sandstack.spec.contract import SSH_PER_SOURCE
from sandstack.spec.roles import HOST_ROLES

ENDPOINT_PATTERN = (
    r"^(unix:///[A-Za-z0-9._/-]+"
    r"|ssh://[a-z_][a-z0-9_.-]*@[A-Za-z0-9.-]+(:[0-9]{1,5})?"
    r"|tcp://[A-Za-z0-9.-]+:[0-9]{1,5})$"
)
ENDPOINT_HINT = "'unix:///var/run/docker.sock', 'ssh://user@host[:port]' or 'tcp://host:port' (with tls)"
Endpoint = text(ENDPOINT_PATTERN, "Docker endpoint", ENDPOINT_HINT)

# Each pool gets a network of this size on each of its hosts, carved from the host's `subnet_pool`
# (sandstack/plan/network.py); one /23 leaves a /24 for up to 250 sandboxes and room for the gateway.
POOL_SUBNET_PREFIX = 23
CIDR4_PATTERN = r"^([0-9]{1,3}\.){3}[0-9]{1,3}/[0-9]{1,2}$"
SubnetPool = text(CIDR4_PATTERN, "IPv4 network", "an IPv4 network in CIDR form, e.g. '10.213.0.0/16'")
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
DnsServer = text(rf"^({_OCTET}\.){{3}}{_OCTET}$", "IPv4 address", "an IPv4 address, e.g. '10.0.0.2'")

GPU_TYPE_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$"
GpuType = text(GPU_TYPE_PATTERN, "GPU type", "a lowercase GPU model name such as 'nvidia-l4'")




# The ingress's container itself changes (its published port, certificate files, data volume or wake token): it
# restarts, its sites unreachable meanwhile; everything else about it (its sites, the domain) reloads in place.
INGRESS_CONTAINER = Effect(host=frozenset({"ingress"}), restarts=frozenset({"ingress"}))


class TlsSecretRef(StrictModel):
    """A Pulumi secret holding PEM text for the provider or the ingress: unlike a sandbox's secrets, a change renews
    the host's provider (endpoint TLS) or its ingress (the ingress's certificate)."""

    secret: ConfigKey = field(
        description="Pulumi config key holding the PEM text.",
        change=Effect(host=frozenset({"provider"}), when=((IN_INGRESS_TLS, INGRESS_CONTAINER),)),
        access=NEVER)


# The infra image and the host's containers that run it (the secrets and data seeders run again with it).
ON_INFRA = frozenset({"infra"} | {name for name, role in HOST_ROLES.items() if role.container})
# Those of them that take their configuration in place are renewed all the same: their container changes.
IN_PLACE = frozenset(name for name in ON_INFRA if HOST_ROLES[name].reload == "in place")
DomainName = text(r"^(?=.{1,200}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$", "domain",
                  "a lower-case DNS name such as 'sandboxes.example.com'")
Email = text(r"^[^@\s]{1,64}@[a-z0-9.-]{1,200}$", "email address", "an address such as 'ops@example.com'")


class IngressTls(StrictModel):
    """The ingress's certificate: PEM text from Pulumi secrets, for `*.<domain>` (a wildcard covers every URL)."""

    cert: TlsSecretRef = field(description="Certificate chain (PEM) for the URLs' names.", change=INGRESS_CONTAINER,
                               access=NEVER)
    key: TlsSecretRef = field(description="Its private key (PEM).", change=INGRESS_CONTAINER,
                              access=NEVER)


class Ingress(StrictModel):
    """A host's URLs for its sandboxes' `exposure: url` ports: Caddy, in a container, routes
    `https://<port>-<pool>-<replica>.<domain>` by host name to that sandbox and port over the pool's network;
    no sandbox port is published (docs/design/ingress.md)."""

    domain: DomainName = field(
        description="The URLs' parent domain; its wildcard `*.<domain>` must resolve to this host. Every sandbox with "
                    "a url port gets SANDSTACK_PUBLIC_HOSTNAME=<pool>-<replica>.<domain>, so a change replaces those "
                    "(a sandbox without one has no URL and keeps running).",
        change=Effect(sandboxes="replace", host=frozenset({"ingress"})),
        access=NEVER)
    port: int = field(443, description="Host port the proxy listens on (HTTPS). Default 443; another port is part "
                      "of every URL, so a change replaces the sandboxes with url ports.",
                      change=Effect(sandboxes="replace", host=frozenset({"ingress"}), restarts=frozenset({"ingress"})),
                      access=NEVER, ge=1, le=65535)
    exposure: Literal["host", "public"] = field(
        "public", description="'public' (default): the proxy's port on all the host's interfaces; 'host': on its "
        "loopback only (behind another proxy or a tunnel).", change=INGRESS_CONTAINER,
        access=loosens("ingress", "to 'public': every url port on the host reachable from every network",
                       "host", "public"))
    tls: IngressTls | None = field(
        None, description="The certificate, from secrets. Without it and without `acme_email`, Caddy's own local CA "
        "signs the URLs (for development: clients must trust that CA).", change=INGRESS_CONTAINER,
        access=NEVER)
    acme_email: Email | None = field(
        None, description="Get certificates from an ACME CA (Caddy's automatic HTTPS) with this contact address; "
        "needs the names to resolve publicly to the host and port 80 reachable for the challenge. Exclusive with "
        "`tls`.", change=INGRESS_CONTAINER,
        access=NEVER)


RUNTIME = Effect(host=frozenset({"runtime"}))
# What the runtime binds or reads at start stays in its container's environment (where it listens, its tokens'
# secrets: sandstack.plan.runtime_host): a change restarts it. The rest is its configuration, taken in place.
RUNTIME_CONTAINER = Effect(host=frozenset({"runtime"}), restarts=frozenset({"runtime"}))
# The ingress reaches the runtime by its socket, not its port: a port changes the runtime alone.
RUNTIME_PORT = RUNTIME_CONTAINER
# The ingress's wake token is in its container's environment: a new runtime token restarts it.
RUNTIME_TOKEN = Effect(host=frozenset({"runtime"}), restarts=frozenset({"runtime"}), when=((INGRESS_HOST, Effect(
    host=frozenset({"runtime", "ingress"}), restarts=frozenset({"ingress", "runtime"}))),))
# A runtime added beside an ingress gives the ingress's network its fixed subnet, and the ingress its wake token and
# the runtime's configuration volume (its socket).
RUNTIME_ADDED = Effect(host=frozenset({"runtime"}), when=((INGRESS_HOST, Effect(
    host=frozenset({"runtime", "ingress"}), restarts=frozenset({"ingress"}))),))


class TokenRef(StrictModel):
    """A Pulumi secret holding a bearer token."""

    secret: ConfigKey = field(description="Pulumi config key holding the token (at least 16 characters).",
                              change=RUNTIME_TOKEN,
                              access=NEVER)


class ScopedToken(StrictModel):
    """A bearer token, from a Pulumi secret, that acts only on its pools on this host."""

    secret: ConfigKey = field(description="Pulumi config key holding the token (at least 16 characters, not the "
                              "host's `token`).", change=RUNTIME_CONTAINER, access=NEVER)
    pools: list[Name] = field(description="The pools it acts on, each placed on this host.", change=RUNTIME,
                              min_length=1, max_length=64,
                              access=loosens("runtime", "a pool added: its holder acts on that pool's sessions too",
                                             ["plain"], ["plain", "agent"]))


class SshHostKeyRef(StrictModel):
    """A Pulumi secret holding the SSH endpoint's host key (an OpenSSH or PEM private key)."""

    secret: ConfigKey = field(description="Pulumi config key holding the private key (`ssh-keygen -t ed25519 -N ''` "
                              "writes one). Clients pin its public half: a new key makes them warn.",
                              change=RUNTIME_CONTAINER, access=NEVER)


class RuntimeSsh(StrictModel):
    """SSH and SFTP into sessions' sandboxes (docs/design/ssh.md): the runtime serves SSH on `port`, on the same
    addresses as its API (`exposure`). A login's user name is a session id; it proves it with the session's token as
    its password or with a public key the claim registered (`ssh_keys`), and gets a shell, commands and SFTP in that
    session's sandbox as the sandbox's user, and, where `forwarding` says so, local forwards into that sandbox (its
    ports, its loopback, its sockets); nothing else (no other address, no other session)."""

    port: int = field(2222, description="Port of the SSH endpoint. Default 2222 (not 22: the host's own sshd has "
                      "it).", change=RUNTIME_CONTAINER, access=NEVER, ge=1, le=65535)
    host_key: SshHostKeyRef = field(description="The endpoint's host key, from a Pulumi secret (never printed).",
                                    change=RUNTIME_CONTAINER, access=NEVER)
    forwarding: Literal["none", "local"] = field(
        "none", description="'none' (default): every forward is refused. 'local': a login may forward local ports "
        "(`ssh -L`, `ssh -D`, editors' remote SSH) into its own session's sandbox only: to its ports at its address "
        "on the pool's network, to its loopback (`localhost`, `127.0.0.1`, `::1`) and to its Unix sockets by path, "
        "the last two through a relay run in the sandbox as its user (python3 or perl in the image, or bash for "
        "TCP); never another address. Every forward, accepted or refused, is audited. Remote forwarding (`ssh -R`) "
        "is refused either way. The runtime reads it at each request, so a change reloads its configuration.",
        change=RUNTIME,
        access=loosens("runtime", "to 'local': an SSH login opens TCP connections to its own sandbox's ports",
                       "none", "local"))
    max_connections_per_source: int = field(
        SSH_PER_SOURCE, description=f"Open SSH connections one source address may hold at once. Default "
        f"{SSH_PER_SOURCE}; a connection past it is closed before its login, and audited. Read at each connection, "
        "so a change reloads the runtime's configuration.", change=RUNTIME,
        access=loosens("runtime", "raised: more SSH connections from one address", SSH_PER_SOURCE,
                       SSH_PER_SOURCE * 2),
        ge=1, le=1024)


class StoreSecretRef(StrictModel):
    """A Pulumi secret holding one of the snapshot store's credentials (never printed)."""

    secret: ConfigKey = field(description="Pulumi config key holding it.", change=RUNTIME_CONTAINER, access=NEVER)


RegistryUrl = text(REGISTRY_URL_PATTERN, "registry URL",
                   "'https://' or 'http://', a host name or IPv4 address and an optional port, no path, such as "
                   "'https://registry.internal:5000'", max_length=262)
RegistryRepository = text(REPOSITORY_PATTERN, "repository",
                          "lowercase letters and digits, single '.', '_' or '-' between them, at most 3 parts joined "
                          "by '/', such as 'sandstack/prod'", max_length=200)
RegistryUser = text(r"^[A-Za-z0-9._@-]{1,128}$", "user name", "letters, digits, '.', '_', '@' and '-'")


class SnapshotStore(StrictModel):
    """Where the runtime keeps sessions' snapshots so that every host of their pool can restore or branch them, a
    lost host's sessions included (docs/design/snapshot-store.md): a registry of the Docker Registry HTTP API V2,
    such as Debian's `docker-registry`, logged in with HTTP basic authentication. Each pool's snapshots go to
    repository `<repository>/<pool>`, tagged by id. Every host of a pool declares the same registry and repository
    (rule snapshot-store)."""

    registry: RegistryUrl = field(description="The registry's address. `http://` only for one on the host itself "
                                  "(127.0.0.1 or localhost): it would carry the password and the sessions' files "
                                  "in clear (rule snapshot-store).", change=RUNTIME, access=NEVER)
    repository: RegistryRepository = field("sandstack", description="The repository under which each pool's "
                                           "snapshots are kept (`<repository>/<pool>`). Default 'sandstack'; give "
                                           "each stack sharing a registry its own.", change=RUNTIME, access=NEVER)
    username: RegistryUser = field(description="The user the runtime logs in as.", change=RUNTIME, access=NEVER)
    password: StoreSecretRef = field(description="Its password, from a Pulumi secret (never printed).",
                                     change=RUNTIME_CONTAINER, access=NEVER)
    ca: StoreSecretRef | None = field(None, description="The CA (PEM) the registry's certificate is checked against, "
                                      "from a Pulumi secret; default the system's CAs. Only with `https://`.",
                                      change=RUNTIME_CONTAINER, access=NEVER)


class RuntimeService(StrictModel):
    """The host's sandbox runtime: agent platforms claim the pools' sandboxes per session, run commands, move
    files, snapshot, pause and release them over its HTTP API (docs/design/runtime.md). It runs in the host's
    network namespace, where the guard already closes the host to every sandbox."""

    port: int = field(7480, description="Port of its HTTP API. Default 7480.", change=RUNTIME_PORT,
                      access=NEVER, ge=1, le=65535)
    exposure: Literal["host", "public"] = field(
        "host", description="'host' (default): on the host's loopback only (an agent platform on the host, or a "
        "tunnel); 'public': on all its interfaces (use TLS in front of it).", change=RUNTIME_CONTAINER,
        access=loosens("runtime", "to 'public': the runtime API on all the host's interfaces", "host", "public"))
    token: TokenRef = field(description="The bearer token every call must carry.", change=RUNTIME_TOKEN,
                            access=NEVER)
    tokens: dict[Name, ScopedToken] = field(
        {}, description="Scoped tokens, by scope name (a pool, or a tenant's set of pools): each acts only on the "
        "sessions, sandboxes and snapshots of its pools (404 for any other) and on nothing host-wide (audit log, "
        "metrics); `token` stays the operators'. The audit log names the scope, never the token. Default none.",
        change=RUNTIME_CONTAINER, max_length=64,
        access=loosens("runtime", "a token added: its holder acts on its pools' sessions", {},
                       {"tenant": {"secret": "tenantToken", "pools": ["agent"]}}))
    ssh: RuntimeSsh | None = field(
        None, description="An SSH endpoint into sessions' sandboxes (ssh, scp, sftp, rsync, editors' remote SSH), "
        "logged in with a session's token or a key its claim registered; on the API's addresses (`exposure`). "
        "Default none.", change=RUNTIME_CONTAINER,
        access=loosens("runtime", "an SSH endpoint added: a session's token or key opens a shell in its sandbox "
                       "over SSH", None, {"port": 2222, "host_key": {"secret": "runtimeSshHostKey"}}))
    snapshot_store: SnapshotStore | None = field(
        None, description="A snapshot store every host of a pool reads: each snapshot is kept there too before it "
        "is answered, and a host restores or branches one it does not have from there (a lost host's sessions "
        "included), checked as an upload is. Retention, size bounds and scoping stay each host's "
        "(docs/design/snapshot-store.md). Default none: snapshots stay on the host that took them.",
        change=RUNTIME_CONTAINER,
        access=loosens("runtime", "a snapshot store added: sessions' files leave the host for the registry",
                       None, {"registry": "https://registry.internal:5000", "username": "snapshots",
                              "password": {"secret": "snapshotStorePassword"}}))


class TlsMaterial(StrictModel):
    """Client TLS for a `tcp://` endpoint. Each item is a secret reference: PEM text never sits in a spec."""

    ca: TlsSecretRef = field(description="CA certificate that signed the daemon's certificate (PEM).", change=PROVIDER,
                             access=NEVER)
    cert: TlsSecretRef = field(description="Client certificate (PEM) the daemon trusts.", change=PROVIDER,
                               access=NEVER)
    key: TlsSecretRef = field(description="Private key of the client certificate (PEM).", change=PROVIDER,
                              access=NEVER)


GPU_ID_PATTERN = r"^([0-9]{1,3}|GPU-[0-9a-fA-F-]{8,64}|MIG-[0-9a-fA-F-]{8,64})$"
GpuId = text(GPU_ID_PATTERN, "GPU device id", "a device index such as '0' or a UUID such as 'GPU-5f0e…' (nvidia-smi -L)")
# Which devices a sandbox gets is decided by placement: a change that moves an assignment replaces the
# sandboxes whose devices moved (their `device_ids`), and nothing else.
REASSIGNS = changes.Effect(when=((changes.DEVICES_REASSIGNED, changes.Effect(sandboxes="replace", scope="gpu")),))


class GpuInventory(StrictModel):
    """The host's GPUs of one model. Sandboxes asking for that model get devices of it, by id."""

    type: GpuType = field(description="GPU model, matched against templates' `limits.gpus.type`.", change=REASSIGNS,
                          access=NEVER)
    count: int = field(description="How many GPUs of this type the host has.", change=REASSIGNS,
                       access=NEVER, ge=1, le=64)
    ids: list[GpuId] | None = field(  # type: ignore[valid-type]
        None,
        description=(
            "The devices of this type, by index or UUID as `nvidia-smi -L` shows them; as many as `count`. "
            "Default: indexes in declaration order (the first entry's `count` devices from 0, then the next's). "
            "Each sandbox gets its own devices of the type it requests (Docker `device_ids`), so a host with "
            "mixed models never hands out the wrong one."
        ),
        change=REASSIGNS,
        access=NEVER, max_length=64,
    )


class Capacity(StrictModel):
    """What the host can give sandboxes. The pools placed on it must fit (times `overcommit`)."""

    cpus: Cpus = field(description="CPUs available to sandboxes.", change="none",
                       access=NEVER)
    memory: Size = field(description="Memory available to sandboxes.", change="none",
                         access=NEVER)
    disk: Size = field(description="Disk available to sandboxes' writable paths.", change="none",
                       access=NEVER)
    gpus: list[GpuInventory] = field(
        [], description="GPUs on the host. Default none: templates requesting GPUs cannot be placed here.",
        change=REASSIGNS,
        access=NEVER,
    )


class Overcommit(StrictModel):
    """How far the sum of the pools' limits may exceed capacity. 1 (the default) means not at all."""

    cpus: float = field(1.0, description="Ratio for CPUs (CPU is shared, so 2-4 is common).", change="none",
                        access=NEVER, ge=1, le=16)
    memory: float = field(
        1.0, description="Ratio for memory. Above 1 risks the host's OOM killer.", change="none",
        access=NEVER, ge=1, le=4
    )
    disk: float = field(1.0, description="Ratio for disk.", change="none",
                        access=NEVER, ge=1, le=4)


class Host(StrictModel):
    """A Docker host that runs sandboxes: its daemon endpoint, its capacity and its infrastructure image."""

    endpoint: Endpoint = field(
        description=(
            "How the Docker daemon is reached: a local unix socket, ssh (uses the ssh agent and "
            "`ssh_opts`) or tcp with mutual TLS (`tls` required)."
        ),
        change=PROVIDER,
        access=NEVER,
    )
    tls: TlsMaterial | None = field(
        None, description="Client TLS material for a `tcp://` endpoint; required there, refused elsewhere.",
        change=PROVIDER,
        access=NEVER,
    )
    ssh_opts: list[Annotated[str, StringConstraints(max_length=256)]] = field(
        [], description="Extra ssh options for an `ssh://` endpoint, e.g. ['-o', 'StrictHostKeyChecking=yes'].",
        change=PROVIDER,
        access=NEVER, max_length=32,
    )
    capacity: Capacity = field(description="What the host can give sandboxes.", change=REASSIGNS,
                               access=NEVER)
    overcommit: Overcommit = field(Overcommit(), description="Allowed overcommit of capacity.", change="none",
                                   access=NEVER)
    storage_quota: bool = field(
        False,
        description=(
            "Whether the daemon's storage supports per-container size quotas (overlay2 on xfs with pquota). "
            "When true, `limits.disk` also caps a writable root filesystem; when false, templates must keep "
            "a read-only root so that `limits.disk` (the writable paths) is really enforced. Checked, not "
            "applied: a change alone changes no sandbox."
        ),
        change="none",
        access=NEVER,
    )
    platforms: list[Platform] = field(  # type: ignore[valid-type]
        ["linux/amd64"],
        description=(
            "The platforms this host's Docker daemon runs: its own architecture, and any it runs under emulation "
            "(qemu-user-static registered with binfmt_misc; docs/design/platforms.md). A template with a `platform` "
            "runs only on hosts that list it (rule `platform`). Default ['linux/amd64']: what a host declared before "
            "this field ran (templates without a `platform` run on any host). Checked, not applied: a change alone "
            "changes no sandbox."
        ),
        change="none",
        access=NEVER, min_length=1, max_length=2,
    )
    ingress: Ingress | None = field(
        None, description="URLs for the sandboxes' `exposure: url` ports, served by a reverse proxy on this host.",
        # No sandbox has a url port before its host has an ingress (validation), so none learns anything new. Beside
        # a runtime, nothing of the runtime's changes: the ingress reaches it by the socket in the runtime's
        # configuration volume, and the runtime holds the wake token whether an ingress is there or not.
        change=Effect(host=frozenset({"ingress", "guard"})),
        access=AS_FIELDS)
    runtime: RuntimeService | None = field(
        None, description="The sandbox runtime service on this host (claims, exec, files, snapshots); beside an "
        "`ingress`, a request to a URL of a hibernated session's sandbox wakes it through the runtime.",
        change=RUNTIME_ADDED,
        access=loosens("runtime", "added with `exposure: public`",
                       None, {"exposure": "public", "token": {"secret": "runtimeToken"}}))
    dns_upstream: list[DnsServer] = field(
        [],
        description=(
            "DNS servers the host's logging resolvers forward to: the names a logged pool may look up (all but "
            "special-use names for logged 'allow-all', the `allow` names for 'allow-list'; docs/design/egress-log.md). "
            "Empty (the default): the host's own, from its /etc/resolv.conf when the resolvers start."
        ),
        change=Effect(host=frozenset({"logger"})),
        access=NEVER, max_length=8,
    )
    disk_workspaces: Size | None = field(
        None,
        description=(
            "Disk this host sets aside for sandboxes' disk workspaces (`filesystem.writable[].type: disk`): their "
            "sizes times replicas must fit. Unset: the host holds none (the guard needs loop devices and Docker's "
            "data root at /var/lib/docker to enforce their sizes; docs/design/workspaces.md). Checked, not applied."
        ),
        change="none",
        access=NEVER,
    )
    subnet_pool: SubnetPool = field(
        "10.213.0.0/16",
        description=(
            "Addresses for the pools' networks on this host: each pool gets a /23 of it (so at most 2^(23 - "
            "prefix) pools), with the egress gateway on a fixed address the host guard's rules name; the gateway's "
            "egress network and, on a host with both an ingress and a runtime, the ingress's network take a /23 "
            "each too. Must not overlap other Docker networks or routes of the host; two stacks on one host need two "
            "pools. A change renews every pool network (its sandboxes are replaced onto it), the guard's rules, the "
            "gateway, the logging resolvers and, for url ports, the ingress (its address on each network)."
        ),
        # The gateway's own resolver is on its egress network: its container changes with that network.
        change=Effect(sandboxes="replace", host=NETWORK_ROLES, restarts=frozenset({"gateway"}), scope="host",
                      when=((URL_PORTS, Effect(sandboxes="replace", host=NETWORK_ROLES | {"ingress"},
                                               restarts=frozenset({"gateway", "ingress"}),
                                               scope="host")),)),
        access=NEVER,
    )
    infra_image: ImageRef | None = field(
        None,
        description=(
            "Image for the host's egress gateway and guard (needs squid and iptables). Default: sandstack "
            "builds its bundled infra Dockerfile (`components/assets/infra`) on the host. A change renews the "
            "host's containers that run it (guard, gateway, logger, ingress, runtime; the seeders run again)."
        ),
        change=Effect(host=ON_INFRA, restarts=IN_PLACE),
        access=NEVER,
    )
    labels: dict[LabelKey, Annotated[str, StringConstraints(max_length=256)]] = field(
        {},
        description=(
            "Free-form labels copied onto every Docker object sandstack creates on this host: a change replaces "
            "them all (host objects, snapshot images, sandboxes, disk workspaces)."
        ),
        # Every object on the host but its provider: each role's objects carry the labels.
        change=changes.Effect(sandboxes="replace", snapshot="rebuild", secrets=True, data=True, workspaces=True,
                              host=frozenset(changes.HOST_ROLE_WORDS) - {"provider"}, restarts=IN_PLACE, scope="host"),
        access=NEVER,
    )
