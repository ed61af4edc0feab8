"""The security summary of a change: what got looser (and what got tighter), per pool, from the resolved
specs (effective values after profiles and defaults), in words a reviewer acts on.

Which changes loosen access is declared per spec field (sandstack.spec.access, beside the change table); a test
applies each declared loosening at every path it has and checks that this summary names it
(tests/review/test_security.py). A host's runtime API and ingress are named on each pool placed on the host:
the pool's sandboxes are what they reach."""

from __future__ import annotations

from dataclasses import dataclass

from sandstack.plan.snapshot import build_inputs
from sandstack.spec.models import SecretRef
from sandstack.spec.resolve import EffectiveLimits, EffectiveNetwork, ResolvedStack, ResolvedTemplate, pool_sizes

EGRESS_ORDER = {"deny-all": 0, "allow-list": 1, "allow-all": 2}
# A url port is reached through the host's ingress, public unless the ingress is on the loopback: ranked as public.
EXPOSURE_ORDER = {"none": 0, "host": 1, "url": 2, "public": 2}
EXPOSED = {"public": "made public", "url": "given a URL through the host's ingress", "host": "newly published on the host"}
CONNECTION_BOUNDS = (("rate", "new connections a second per sandbox"),
                     ("pool_rate", "new connections a second per pool"),
                     ("open", "open connections per sandbox"), ("pool_open", "open connections per pool"))
# The limits that bound what a sandbox may do to its neighbours (processes, open files). CPUs, memory and disk are
# the sandbox's share of the host: declared `capacity` (sandstack.spec.access), the review's capacity category.
LIMITS = (("pids", "pids"), ("open_files", "open files"))


@dataclass(frozen=True)
class Finding:
    pool: str
    loosens: bool  # True: security got looser; False: tighter
    area: str  # one of sandstack.spec.access.AREAS
    text: str

    def to_json(self) -> dict:
        return {"pool": self.pool, "loosens": self.loosens, "area": self.area, "text": self.text}


def _secret_keys(t: ResolvedTemplate) -> dict[str, str]:
    """Where each secret goes → its config key (env variables and secret files)."""
    out = {f"env {k}": v.secret for k, v in t.env.items() if isinstance(v, SecretRef)}
    out.update({f"file {s.path}": s.secret for s in t.secrets})
    return out


def _is_root(user: str) -> bool:
    """Whether a `user` (uid or name, with an optional group) runs as uid 0: `0`, `root`, `0:0`, `root:root`."""
    return user.split(":", 1)[0].strip() in ("0", "root")


def compare_templates(pool: str, old: ResolvedTemplate, new: ResolvedTemplate) -> list[Finding]:
    out: list[Finding] = []

    def add(loosens: bool, area: str, text: str) -> None:
        out.append(Finding(pool, loosens, area, text))

    # Egress: the one policy, or with network profiles their envelope (the loosest: what any profile reaches), then
    # each profile by name (docs/design/network-profiles.md).
    profiled = bool(old.network_profiles or new.network_profiles)
    for loosens, text in _egress(old.network, new.network, new.name):
        add(loosens, "egress", f"loosest network profile: {text}" if profiled else text)
    before, after = dict(old.network_profiles), dict(new.network_profiles)
    for name, policy in after.items():
        if name in before:
            for loosens, text in _egress(before[name], policy, new.name):
                add(loosens, "egress", f"network profile {name}: {text}")
            continue
        # A profile added: judged against everything a sandbox could reach before (the old policy or envelope).
        found = _egress(old.network, policy, new.name)
        add(any(loosens for loosens, _ in found), "egress", f"network profile {name} added (egress {policy.egress}"
            + (f", allow {', '.join(map(str, policy.allow))}" if policy.allow else "") + ")")
    for name in before:
        if name not in after:
            add(False, "egress", f"network profile {name} removed")
    # Limits.
    for name, words in LIMITS:
        x, y = getattr(old.limits, name), getattr(new.limits, name)
        if x != y:
            add(y > x, "limits", f"{words} {x:g} → {y:g}" if isinstance(x, float) else f"{words} {x} → {y}")
    gpus_a = old.limits.gpus.count if old.limits.gpus else 0
    gpus_b = new.limits.gpus.count if new.limits.gpus else 0
    if gpus_a != gpus_b:
        add(gpus_b > gpus_a, "limits", f"GPUs {gpus_a} → {gpus_b}")
    # Ports.
    ports_a = {(p.port, p.protocol): p.exposure for p in old.ports}
    for p in new.ports:
        before = ports_a.get((p.port, p.protocol), "none")
        if EXPOSURE_ORDER[p.exposure] > EXPOSURE_ORDER[before]:
            add(True, "ports", f"port {p.port}/{p.protocol} {EXPOSED[p.exposure]} (was {before})")
        elif EXPOSURE_ORDER[p.exposure] < EXPOSURE_ORDER[before]:
            add(False, "ports", f"port {p.port}/{p.protocol} exposure {before} → {p.exposure}")
    # Who may open its URLs: 'none' opens them to anyone who knows their host names.
    if old.url_auth != new.url_auth and any(p.exposure == "url" for p in new.ports):
        opened = new.url_auth == "none"
        add(opened, "ports", "URLs open to anyone who knows their host name (was: the session's token only)" if opened
            else "URLs need the session's token (urls.auth: session)")
    # Privileges.
    for cap in sorted(set(new.capabilities) - set(old.capabilities)):
        add(True, "privileges", f"capability {cap} added")
    for cap in sorted(set(old.capabilities) - set(new.capabilities)):
        add(False, "privileges", f"capability {cap} removed")
    if old.privileged != new.privileged:
        add(new.privileged, "privileges", "privileged " + ("on" if new.privileged else "off"))
    if old.no_new_privileges != new.no_new_privileges:
        add(not new.no_new_privileges, "privileges",
            "no_new_privileges " + ("on" if new.no_new_privileges else "off"))
    if _is_root(old.user) != _is_root(new.user):
        add(_is_root(new.user), "privileges", f"user {old.user} → {new.user}")
    if old.read_only_root != new.read_only_root:
        add(not new.read_only_root, "privileges", "root filesystem " + ("read-only" if new.read_only_root else "writable"))
    if old.sudo != new.sudo:
        add(new.sudo, "privileges", "sudo " + ("on" if new.sudo else "off"))
    # What the setup steps reach (docs/design/setup-policy.md): the build's egress, not the sandbox's. The policy is
    # not in the build digest, so a changed one keeps the image its steps made: said here, never silently.
    if old.setup_network != new.setup_network:
        add(new.setup_network == "template", "egress",
            f"setup steps {'reach the template’s policy' if new.setup_network == 'template' else 'reach no network'}"
            f" (setup_network {old.setup_network} → {new.setup_network})")
    elif (old.setup and new.setup and old.setup_policy and new.setup_policy and build_inputs(old) == build_inputs(new)
          and any(not looser for looser, _ in _egress(old.setup_policy, new.setup_policy, new.name))):
        add(False, "egress", "setup policy narrowed but the snapshot is kept, built under the wider former policy: "
            "bump `snapshot.version` to rebuild it under the new one")
    if old.runtime != new.runtime:
        add(new.runtime == "runc", "privileges", f"runtime {old.runtime} → {new.runtime}")
    # Writable paths: noexec unless `exec`, so what the sandbox writes or downloads there cannot run.
    exec_a = {w.path for w in old.writable if w.exec}
    exec_b = {w.path for w in new.writable if w.exec}
    for path in sorted(exec_b - exec_a):
        add(True, "filesystem", f"writable path {path} made exec: programs written there can run")
    for path in sorted(exec_a - exec_b):
        add(False, "filesystem", f"writable path {path} no longer exec")
    # Lifetime (0 = unlimited / never).
    for name, words in (("max_lifetime", "max lifetime"), ("idle_timeout", "idle timeout")):
        x, y = getattr(old.lifecycle, name), getattr(new.lifecycle, name)
        if x != y:
            looser = y == 0 or (x != 0 and y > x)
            add(looser, "lifetime", f"{words} {x or 'none'}{'s' if x else ''} → {y or 'none'}{'s' if y else ''}"
                + (" (removed)" if y == 0 else ""))
    # The runtime's exec bound: a longer one lets a session's command run longer.
    x, y = old.session.exec_max_timeout, new.session.exec_max_timeout
    if x != y:
        add(y > x, "lifetime", f"exec max timeout {x}s → {y}s")
    # Secrets: keys only.
    keys_a, keys_b = _secret_keys(old), _secret_keys(new)
    for where in sorted(keys_b.keys() - keys_a.keys()):
        add(True, "secrets", f"secret added: {where} from `{keys_b[where]}`")
    for where in sorted(keys_a.keys() - keys_b.keys()):
        add(False, "secrets", f"secret removed: {where} (was `{keys_a[where]}`)")
    for where in sorted(keys_a.keys() & keys_b.keys()):
        if keys_a[where] != keys_b[where]:
            add(True, "secrets", f"secret re-pointed: {where} `{keys_a[where]}` → `{keys_b[where]}`")
    return out


def compare(old: ResolvedStack, new: ResolvedStack) -> list[Finding]:
    out: list[Finding] = []
    for pool in sorted(set(old.pools) | set(new.pools)):
        if pool not in old.pools:
            t = new.templates[new.pools[pool].template]
            out.append(Finding(pool, True, "pool", f"new pool of template `{t.name}` with egress {t.network.egress}"))
            continue
        if pool not in new.pools:
            out.append(Finding(pool, False, "pool", "pool removed"))
            continue
        old_t, new_t = old.templates[old.pools[pool].template], new.templates[new.pools[pool].template]
        out += compare_templates(pool, old_t, new_t)
        out += compare_sizes(pool, pool_sizes(old.pools[pool], old_t.limits), pool_sizes(new.pools[pool], new_t.limits),
                             new_t.limits.pids)
    return out + compare_hosts(old, new)


def compare_sizes(pool: str, old: dict[str, EffectiveLimits], new: dict[str, EffectiveLimits],
                  own: int) -> list[Finding]:
    """A pool's size classes (`pools.*.sizes`): the pids a claim of each may be given. CPUs, memory and disk are
    capacity (the review's capacity section counts the largest class). `own`: the pool's own pids now."""
    out = []
    for name in sorted(set(old) | set(new)):
        if name in old and name in new:
            x, y = old[name].pids, new[name].pids
            if x != y:
                out.append(Finding(pool, y > x, "limits", f"size class {name} pids {x} → {y}"))
        elif name in new and new[name].pids > own:
            out.append(Finding(pool, True, "limits", f"size class {name} added: pids {new[name].pids} (the pool's "
                                                     f"own {own})"))
        elif name in old and old[name].pids > own:
            out.append(Finding(pool, False, "limits", f"size class {name} removed (pids {old[name].pids})"))
    return out


def _exposure(service: object | None) -> str:
    return getattr(service, "exposure", None) or "none"


def _where(service: object) -> str:
    exposure, port = getattr(service, "exposure"), getattr(service, "port")
    return f"{'all its interfaces' if exposure == 'public' else 'its loopback'}, port {port}"


def _new_listeners(host: str, pools: list[str], a: object | None, b: object, new: ResolvedStack) -> list[Finding]:
    """New ways in on a host, named on each pool they reach: a runtime API added (any exposure: its sessions drive
    the pool's sandboxes) or listening on another port, an ingress added (its URLs reach the pool's url ports) or
    listening on another port; and the same taken away, tighter."""
    out: list[Finding] = []
    for name, words in (("runtime", "runtime API"), ("ingress", "ingress")):
        x, y = getattr(a, name, None) if a is not None else None, getattr(b, name, None)
        for pool in pools:
            ports = sorted(p.port for p in new.templates[new.pools[pool].template].ports if p.exposure == "url")
            if name == "ingress" and not ports:
                continue  # an ingress serves only url ports: nothing of this pool is reached through it
            reach = ("its sessions drive this pool's sandboxes" if name == "runtime" else
                     f"its URLs reach url port{'s' if len(ports) > 1 else ''} {', '.join(map(str, ports))} of this "
                     "pool's sandboxes")
            if x is None and y is not None:
                out.append(Finding(pool, True, name, f"{words} added on host {host}, listening on {_where(y)}: "
                                                     f"{reach}"))
            elif x is not None and y is None:
                out.append(Finding(pool, False, name, f"{words} removed from host {host}"))
            elif x is not None and y is not None and x.port != y.port:  # type: ignore[attr-defined]
                out.append(Finding(pool, True, name, f"{words} of host {host} listens on a new address: "
                                                     f"{_where(y)} (was port {x.port}): {reach}"))  # type: ignore[attr-defined]
    return out


def _store(store) -> str | None:
    """A snapshot store as the summary names it: where the files go (its registry and repository)."""
    return None if store is None else f"{store.registry}/{store.repository}"


def compare_hosts(old: ResolvedStack, new: ResolvedStack) -> list[Finding]:
    """The host services that reach the sandboxes: the runtime API (its sessions drive the pools' sandboxes) and
    the ingress (every url port on the host), each named on the pools placed on the host."""
    out: list[Finding] = []
    for host in sorted(new.hosts):
        a, b = old.hosts.get(host), new.hosts[host]
        pools = [name for name, pool in sorted(new.pools.items()) if host in pool.hosts]
        before, after = _exposure(a.runtime if a else None), _exposure(b.runtime)
        out += _new_listeners(host, pools, a, b, new)
        # A runtime added or removed is named by _new_listeners, with where it listens.
        if before != after and "public" in (before, after) and "none" not in (before, after):
            loosens = after == "public"
            text = (f"runtime API of host {host} made public (was {before}): its sessions reach this pool's "
                    "sandboxes from every network" if loosens else f"runtime API of host {host} public → {after}")
            out += [Finding(pool, loosens, "runtime", text) for pool in pools]
        # Scoped tokens: a token added, or a pool added to one, lets its holder act on that pool's sessions.
        scopes_a = {n: set(t.pools) for n, t in (a.runtime.tokens.items() if a and a.runtime else ())}
        scopes_b = {n: set(t.pools) for n, t in (b.runtime.tokens.items() if b.runtime else ())}
        for scope in sorted(scopes_a.keys() | scopes_b.keys()):
            before_pools, after_pools = scopes_a.get(scope, set()), scopes_b.get(scope, set())
            out += [Finding(pool, True, "runtime", f"runtime token '{scope}' of host {host} now acts on this pool's "
                            "sessions") for pool in pools if pool in after_pools - before_pools]
            out += [Finding(pool, False, "runtime", f"runtime token '{scope}' of host {host} no longer acts on this "
                            "pool's sessions") for pool in pools if pool in before_pools - after_pools]
        # The runtime's SSH endpoint (docs/design/ssh.md): added, a shell in each session's sandbox over SSH.
        ssh_a = a.runtime.ssh if a and a.runtime else None
        ssh_b = b.runtime.ssh if b.runtime else None
        if (ssh_a is None) != (ssh_b is None) or (ssh_a and ssh_b and ssh_a.port != ssh_b.port):
            where = "127.0.0.1" if b.runtime and b.runtime.exposure == "host" else "every interface"
            text = (f"SSH endpoint of host {host}'s runtime removed" if ssh_b is None else
                    f"SSH endpoint {'added to' if ssh_a is None else 'moved on'} host {host}'s runtime, on {where} "
                    f"port {ssh_b.port}: a session's token or claim key opens a shell in its sandbox")
            out += [Finding(pool, ssh_b is not None, "runtime", text) for pool in pools]
        # The snapshot store (docs/design/snapshot-store.md): the sessions' files copied to a registry off the host.
        store_a = _store(a.runtime.snapshot_store if a and a.runtime else None)
        store_b = _store(b.runtime.snapshot_store if b.runtime else None)
        if store_a != store_b:
            text = (f"snapshot store of host {host}'s runtime removed (was {store_a})" if store_b is None else
                    f"snapshot store {store_b} {'added to' if store_a is None else 'replaces ' + store_a + ' on'} "
                    f"host {host}'s runtime: its sessions' snapshots (their files) are copied there")
            out += [Finding(pool, store_b is not None, "runtime", text) for pool in pools]
        # Its local forwards (docs/design/ssh.md): TCP from a login into its own sandbox's ports.
        forward_a, forward_b = (ssh.forwarding if ssh else "none" for ssh in (ssh_a, ssh_b))
        if forward_a != forward_b and ssh_b is not None:
            loosens = forward_b == "local"
            text = (f"SSH logins on host {host} may forward local ports to their own sandbox's ports (forwarding "
                    f"{forward_a} → {forward_b})" if loosens else
                    f"SSH forwarding on host {host} turned off (forwarding {forward_a} → {forward_b})")
            out += [Finding(pool, loosens, "runtime", text) for pool in pools]
        if ssh_a and ssh_b and ssh_a.max_connections_per_source != ssh_b.max_connections_per_source:
            x, y = ssh_a.max_connections_per_source, ssh_b.max_connections_per_source
            out += [Finding(pool, y > x, "runtime", f"SSH connections one source address may hold on host {host}: "
                            f"{x} → {y}") for pool in pools]
        # An ingress added comes with url ports, which the ports comparison names; here: one turned public or back.
        before, after = _exposure(a.ingress if a else None), _exposure(b.ingress)
        if {before, after} == {"host", "public"}:
            for pool in pools:
                ports = sorted(p.port for p in new.templates[new.pools[pool].template].ports if p.exposure == "url")
                if ports:
                    listed = ", ".join(map(str, ports))
                    out.append(Finding(pool, after == "public", "ingress", f"url ports {listed} made public: host "
                                       f"{host}'s ingress exposure host → public" if after == "public" else
                                       f"url ports {listed} back on host {host}'s loopback: its ingress exposure "
                                       "public → host"))
    return out



def _egress(a: EffectiveNetwork, b: EffectiveNetwork, name: str) -> list[tuple[bool, str]]:
    """What got looser (True) or tighter (False) from policy `a` to `b` of template `name`: mode, lists, logging,
    metadata, a direct route's bounds."""
    out: list[tuple[bool, str]] = []
    if a.egress != b.egress:
        out.append((EGRESS_ORDER[b.egress] > EGRESS_ORDER[a.egress], f"egress {a.egress} → {b.egress}"))
    allow_a, allow_b = {str(r) for r in a.allow}, {str(r) for r in b.allow}
    deny_a, deny_b = {str(r) for r in a.deny}, {str(r) for r in b.deny}
    if b.egress != "deny-all":
        out += [(True, f"allow entry added: {entry}") for entry in sorted(allow_b - allow_a)]
        out += [(True, f"deny entry removed: {entry}") for entry in sorted(deny_a - deny_b)]
    out += [(False, f"allow entry removed: {entry}") for entry in sorted(allow_a - allow_b)]
    out += [(False, f"deny entry added: {entry}") for entry in sorted(deny_b - deny_a)]
    # `protocols: any`: a direct route out for any protocol instead of the gateway, each connection logged.
    if a.outbound == "gateway" and b.logs_connections:
        out.append((True, f"egress of template {name} made direct for any protocol (every connection logged)"))
    elif a.logs_connections and b.outbound == "gateway":
        out.append((False, f"egress of template {name} back through the gateway (HTTP only, every request logged)"))
    if a.log != b.log and b.egress != "deny-all":
        out.append((not b.log, "egress logging turned " + ("on" if b.log else "off")))
    if a.allow_metadata != b.allow_metadata:
        out.append((b.allow_metadata, "metadata addresses " + ("reachable" if b.allow_metadata else "refused again")))
    # A direct route's connection bounds (the guard's rules): raising one loosens it.
    if b.outbound == "direct":
        for field, words in CONNECTION_BOUNDS:
            x, y = getattr(a.connections, field), getattr(b.connections, field)
            if x != y:
                out.append((y > x, f"{words} {x} → {y}"))
    return out
