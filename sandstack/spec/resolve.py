"""From a validated `Stack` to concrete settings: profiles, defaults and built-ins applied once.

Precedence, lowest first: built-ins → stack `defaults` → the template. `limits` merge field by field
(a profile first, then single fields); `lifecycle`, `filesystem` and `security` merge field by field;
`env` merges by variable; `network` is taken whole from the template, else from the defaults, so an
allow-list is never the accidental union of two lists. A template with `network_profiles` has each profile whole, and
as its `network` their envelope: what any of them reaches (the route, the logging resolver's names, the review's
loosest profile).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from sandstack.spec.egress import EgressRule, parse_entry
from sandstack.spec.models.network import ConnectionBounds, Urls
from sandstack.spec.models import (
    BUILTIN_LIMITS,
    GpuRequest,
    Host,
    Limits,
    NetworkPolicy,
    Pool,
    Port,
    Readiness,
    SecretFile,
    SecretRef,
    Stack,
    SessionPolicy,
    Template,
    WritablePath,
)
from sandstack.spec.units import MIB

if TYPE_CHECKING:
    from sandstack.spec.lockfile import AddressLock

BUILTIN_USER = "10001:10001"
BUILTIN_RUNTIME = "runc"
BUILTIN_MAX_LIFETIME = 24 * 3600
BUILTIN_WRITABLE = (WritablePath(path="/tmp", size=64 * MIB),)
# Small on purpose: /dev/shm is memory-backed and writable by any sandbox (Docker's default is 64MiB).
BUILTIN_SHM_SIZE = 16 * MIB


class UnknownProfile(KeyError):
    """A `limits` that names a profile the stack does not define (reported by rule `ref-profile`)."""


@dataclass(frozen=True)
class EffectiveLimits:
    cpus: float
    memory: int
    disk: int
    pids: int
    open_files: int  # the nofile ulimit of each process, soft and hard
    gpus: GpuRequest | None = None


Outbound = Literal["none", "gateway", "direct"]


def decode_egress(egress: str, log: bool | None, protocols: str | None = None) -> tuple[Outbound, bool]:
    """The one decoding of a policy's `egress`, `log` and `protocols`: how its traffic leaves and whether it is
    logged. deny-all: nowhere; allow-list: through the gateway, logged (rule egress-mode refuses `log: false`);
    allow-all: through the gateway and logged, or directly and connection-logged with `protocols: any`, or
    directly and unlogged with `log: false`."""
    if egress == "deny-all":
        return "none", False
    if egress == "allow-all" and log is not False and protocols == "any":
        return "direct", True
    if egress == "allow-list" or log is not False:
        return "gateway", True
    return "direct", False


@dataclass(frozen=True)
class EffectiveNetwork:
    egress: str
    allow: tuple[EgressRule, ...]
    deny: tuple[EgressRule, ...]
    log: bool
    # Reach METADATA_RANGES (sandstack.spec.egress); false (the default) in every mode unless opted in.
    allow_metadata: bool = False
    protocols: str | None = None
    # A direct route's bounds on new and open connections (the guard's rules; sandstack.plan.network).
    connections: ConnectionBounds = ConnectionBounds()

    @property
    def outbound(self) -> Outbound:
        return decode_egress(self.egress, self.log, self.protocols)[0]

    @property
    def logs_connections(self) -> bool:
        """Direct and logged: every new connection goes to the host's connection logger."""
        return self.outbound == "direct" and self.log

    @property
    def uses_gateway(self) -> bool:
        """allow-list always, allow-all when logged: their traffic leaves through the host's proxy."""
        return self.outbound == "gateway"


@dataclass(frozen=True)
class EffectiveLifecycle:
    max_lifetime: int  # seconds; 0 = unlimited
    idle_timeout: int  # seconds; 0 = never
    on_expiry: str


@dataclass(frozen=True)
class ResolvedFile:
    source: Path
    path: str
    mode: str


@dataclass(frozen=True)
class ResolvedData:
    """A read-only data mount: `files` are (path relative to the mount, file next to the stack), sorted."""

    source: Path
    path: str
    files: tuple[tuple[str, Path], ...]


def data_files(source: Path) -> tuple[tuple[str, Path], ...]:
    if source.is_file():
        return ((source.name, source),)
    return tuple((p.relative_to(source).as_posix(), p) for p in sorted(source.rglob("*")) if p.is_file())


@dataclass(frozen=True)
class ResolvedTemplate:
    name: str
    description: str
    base_image: str
    snapshot_version: str | None
    setup: tuple[str, ...]
    files: tuple[ResolvedFile, ...]
    push_to: str | None
    env: dict[str, str | SecretRef]
    secrets: tuple[SecretFile, ...]
    data: tuple[ResolvedData, ...]
    user: str
    workdir: str | None
    entrypoint: tuple[str, ...] | None
    command: tuple[str, ...] | None
    readiness: Readiness | None
    limits: EffectiveLimits
    network: EffectiveNetwork
    ports: tuple[Port, ...]
    runtime: str
    lifecycle: EffectiveLifecycle
    read_only_root: bool
    writable: tuple[WritablePath, ...]
    shm_size: int  # bytes, whole MiB (rule memory-unit)
    capabilities: tuple[str, ...]
    privileged: bool
    no_new_privileges: bool
    sudo: bool = False  # the user may `sudo` (its capabilities and no_new_privileges above already say so)
    session: SessionPolicy = field(default_factory=lambda: SessionPolicy())  # the runtime's, whole block
    platform: str | None = None  # 'linux/arm64'...; None: each host's own architecture
    url_auth: str = "none"  # who may open its URLs (`urls.auth`)
    # Its network profiles by name (docs/design/network-profiles.md), in the file's order, and the one a session
    # starts in; `network` is then their envelope. Empty: no profiles, `network` is the one policy.
    network_profiles: tuple[tuple[str, EffectiveNetwork], ...] = ()
    start_profile: str | None = None
    setup_network: str = "template"  # `snapshot.setup_network`: the setup steps under `setup_policy`, or 'none'

    @property
    def setup_policy(self) -> EffectiveNetwork | None:
        """What the setup steps reach: what a new session does (its one policy, or its start profile); None for
        'none' (no network at all)."""
        if self.setup_network == "none":
            return None
        return dict(self.network_profiles).get(self.start_profile or "", self.network)


@dataclass(frozen=True)
class ResolvedStack:
    """Everything the components need, with no reference left to follow and no default left to apply."""

    source: Path
    hosts: dict[str, Host]
    templates: dict[str, ResolvedTemplate]
    pools: dict[str, Pool]
    spec: Stack = field(repr=False)  # after inheritance: each template whole (sandstack.spec.inherit)
    # The stack as the file wrote it, before inheritance (what a diff compares field by field); None: the same.
    written_spec: Stack | None = field(default=None, repr=False, compare=False)
    # The addresses allocated before (the lock beside the spec file, sandstack.spec.addresses): the plan keeps them
    # and allocates only what it lacks. None: no lock, every address allocated afresh.
    addresses: AddressLock | None = field(default=None, repr=False)

    @property
    def written(self) -> Stack:
        return self.written_spec if self.written_spec is not None else self.spec


def effective_limits(stack: Stack, template: Template | None) -> EffectiveLimits:
    merged: dict[str, object] = dict(BUILTIN_LIMITS)
    for layer in (stack.defaults.limits, template.limits if template else None):
        merged.update(_limit_fields(stack, layer))
    return EffectiveLimits(**merged)  # type: ignore[arg-type]


SIZE_FIELDS = ("cpus", "memory", "disk", "pids")  # what a size class sets (sandstack.spec.models.SizeClass)


def pool_sizes(pool: Pool, limits: EffectiveLimits) -> dict[str, EffectiveLimits]:
    """Each size class of the pool as the limits a claim naming it gets: the class's fields over the pool's own
    (`limits`, its template's), in the order the spec declares them."""
    return {name: replace(limits, **{k: getattr(c, k) for k in SIZE_FIELDS if getattr(c, k) is not None})
            for name, c in (pool.sizes or {}).items()}


def largest_size(pool: Pool, limits: EffectiveLimits) -> EffectiveLimits:
    """The most of each dimension a sandbox of the pool may be given: the pool's own limits or a larger class's.
    Capacity rules and the review count it at the ceiling, since every sandbox may be claimed at its largest."""
    sizes = [limits, *pool_sizes(pool, limits).values()]
    return replace(limits, **{k: max(getattr(s, k) for s in sizes) for k in SIZE_FIELDS})


def _limit_fields(stack: Stack, layer: str | Limits | None) -> dict[str, object]:
    if layer is None:
        return {}
    if isinstance(layer, str):
        return _limit_fields(stack, _profile(stack, layer))
    fields: dict[str, object] = {}
    profile = getattr(layer, "profile", None)
    if profile is not None:
        fields.update(_limit_fields(stack, _profile(stack, profile)))
    fields.update({k: v for k, v in layer.model_dump(exclude={"profile"}).items() if v is not None})
    if layer.gpus is not None:
        fields["gpus"] = layer.gpus
    return fields


def _profile(stack: Stack, name: str) -> Limits:
    if name not in stack.profiles:
        raise UnknownProfile(name)
    return stack.profiles[name]


def effective_network(stack: Stack, template: Template) -> EffectiveNetwork:
    if template.network_profiles is not None:
        return envelope(tuple(policy_network(p) for p in template.network_profiles.profiles.values()))
    return policy_network(template.network or stack.defaults.network or NetworkPolicy())


def effective_profiles(template: Template) -> tuple[tuple[str, EffectiveNetwork], ...]:
    if template.network_profiles is None:
        return ()
    return tuple((name, policy_network(p)) for name, p in template.network_profiles.profiles.items())


EGRESS_RANK = {"deny-all": 0, "allow-list": 1, "allow-all": 2}


def envelope(profiles: tuple[EffectiveNetwork, ...]) -> EffectiveNetwork:
    """What any of a template's profiles reaches, as one policy: the widest mode, every allow entry, only the denies
    every profile with egress has (a deny-all profile denies all). Its route is theirs (they share one: rule
    network-profiles); it is what the pool's network, the logging resolver and the review's loosest profile read."""
    widest = max(profiles, key=lambda n: EGRESS_RANK[n.egress])
    if widest.egress == "deny-all":
        return widest
    out = [n for n in profiles if n.egress != "deny-all"]
    allow = () if widest.egress == "allow-all" else tuple(dict.fromkeys(r for n in out for r in n.allow))
    deny = tuple(r for r in out[0].deny if all(r in n.deny for n in out[1:]))
    return EffectiveNetwork(egress=widest.egress, allow=allow, deny=deny, log=all(n.log for n in out),
                            allow_metadata=any(n.allow_metadata for n in out), protocols=widest.protocols,
                            connections=widest.connections)


def policy_network(policy: NetworkPolicy) -> EffectiveNetwork:
    _, log = decode_egress(policy.egress, policy.log, policy.protocols)
    return EffectiveNetwork(
        egress=policy.egress,
        allow=tuple(parse_entry(e) for e in policy.allow),
        deny=tuple(parse_entry(e) for e in policy.deny),
        log=log,
        allow_metadata=policy.allow_metadata,
        protocols=policy.protocols if policy.egress == "allow-all" and log else None,
        connections=policy.connections,
    )


def _pick(*values):
    return next((v for v in values if v is not None), None)


# What `security.sudo` adds to a sandbox's bounding set: switching user, sudo's audit record, and the root
# actions of package managers and file ownership.
SUDO_CAPABILITIES = ("SETUID", "SETGID", "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER")

# Built-ins of the blocks merged field by field (`lifecycle`, `filesystem`, `security`).
BUILTIN_FIELDS: dict[tuple[str, str], object] = {
    ("lifecycle", "max_lifetime"): BUILTIN_MAX_LIFETIME,
    ("lifecycle", "idle_timeout"): 0,
    ("lifecycle", "on_expiry"): "stop",
    ("filesystem", "read_only_root"): True,
    ("filesystem", "writable"): BUILTIN_WRITABLE,
    ("filesystem", "shm_size"): BUILTIN_SHM_SIZE,
    ("security", "capabilities"): (),
    ("security", "privileged"): False,
    ("security", "no_new_privileges"): True,
    ("security", "sudo"): False,
}


def scaled_builtin(block: str, name: str, memory: int):
    """The built-in /tmp and /dev/shm of a sandbox: 64MiB and 16MiB, or a quarter and an eighth of a smaller
    memory limit (in whole MiB, at least 1MiB), so that built-ins alone never fill a small sandbox's memory
    (rule writable-memory)."""
    if (block, name) == ("filesystem", "writable"):
        return (WritablePath(path="/tmp", size=max(MIB, min(BUILTIN_WRITABLE[0].size, memory // 4 // MIB * MIB))),)
    if (block, name) == ("filesystem", "shm_size"):
        return max(MIB, min(BUILTIN_SHM_SIZE, memory // 8 // MIB * MIB))
    return BUILTIN_FIELDS[(block, name)]


def inherited(stack: Stack, template: Template, block: str, name: str):
    """One field of a field-by-field block: the template's, else the defaults', else the built-in.
    An explicit empty list counts as set (`writable: []` means none)."""
    own, default = getattr(template, block), getattr(stack.defaults, block)
    chosen = _pick(own and getattr(own, name), default and getattr(default, name))
    if chosen is not None:
        return chosen
    if block != "filesystem":
        return BUILTIN_FIELDS[(block, name)]
    try:
        memory = effective_limits(stack, template).memory
    except UnknownProfile:
        memory = BUILTIN_LIMITS["memory"]  # rule ref-profile reports the profile
    return scaled_builtin(block, name, memory)


def effective_writable(stack: Stack, template: Template) -> tuple[WritablePath, ...]:
    return tuple(inherited(stack, template, "filesystem", "writable"))


def effective_user(stack: Stack, template: Template) -> str:
    return _pick(template.user, stack.defaults.user, BUILTIN_USER)


def resolve_template(stack: Stack, name: str, source: Path) -> ResolvedTemplate:
    """Apply profiles, defaults and built-ins to one template. Assumes the semantic rules passed."""
    t = stack.templates[name]
    d = stack.defaults

    def field(block: str, name: str):
        return inherited(stack, t, block, name)

    return ResolvedTemplate(
        name=name,
        description=t.description,
        base_image=t.base_image,
        snapshot_version=t.snapshot.version,
        setup=tuple(t.snapshot.setup),
        files=tuple(ResolvedFile(source.parent / f.source, f.path, f.mode) for f in t.snapshot.files),
        push_to=t.snapshot.push_to,
        env={**d.env, **t.env},
        secrets=tuple(t.secrets),
        data=tuple(ResolvedData(source.parent / d.source, d.path, data_files(source.parent / d.source))
                   for d in t.data),
        user=effective_user(stack, t),
        workdir=_pick(t.workdir, d.workdir),
        entrypoint=tuple(t.entrypoint) if t.entrypoint else None,
        command=tuple(t.command) if t.command else None,
        readiness=t.readiness,
        limits=effective_limits(stack, t),
        network=effective_network(stack, t),
        ports=tuple(t.ports),
        runtime=_pick(t.runtime, d.runtime, BUILTIN_RUNTIME),
        lifecycle=EffectiveLifecycle(
            max_lifetime=field("lifecycle", "max_lifetime"),
            idle_timeout=field("lifecycle", "idle_timeout"),
            on_expiry=field("lifecycle", "on_expiry"),
        ),
        read_only_root=field("filesystem", "read_only_root"),
        writable=effective_writable(stack, t),
        shm_size=field("filesystem", "shm_size"),
        # sudo's root actions need these in the bounding set, and setuid needs no_new_privileges off.
        capabilities=tuple(dict.fromkeys((*field("security", "capabilities"),
                                          *(SUDO_CAPABILITIES if field("security", "sudo") else ())))),
        privileged=field("security", "privileged"),
        no_new_privileges=field("security", "no_new_privileges") and not field("security", "sudo"),
        sudo=field("security", "sudo"),
        session=t.session or d.session or SessionPolicy(),
        platform=_pick(t.platform, d.platform),
        url_auth=(t.urls or d.urls or Urls()).auth,
        network_profiles=effective_profiles(t),
        start_profile=t.network_profiles.start if t.network_profiles else None,
        setup_network=t.snapshot.setup_network,
    )


def resolve_stack(stack: Stack, source: Path) -> ResolvedStack:
    return ResolvedStack(
        source=source,
        hosts=dict(stack.hosts),
        templates={name: resolve_template(stack, name, source) for name in stack.templates},
        pools=dict(stack.pools),
        spec=stack,
    )
