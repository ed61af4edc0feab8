"""Semantic rules: what a schema cannot say. One small named function per rule, each with a test.

Every rule yields located diagnostics and never raises; a rule that depends on a reference another
rule checks (a pool's template, a profile) skips what is broken rather than reporting it twice.
"""

from __future__ import annotations

import ipaddress
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from sandstack.spec.contract import RUN_DIR, SECRETS_DIR
from sandstack.spec.egress import METADATA_RANGES, EgressEntryError, parse_entry
from sandstack.spec.errors import Diagnostic, JsonPath
from sandstack.spec.loader import Document
from sandstack.spec.models import NetworkPolicy, Stack, Template
from sandstack.spec.models.hosts import POOL_SUBNET_PREFIX
from sandstack.spec.models.limits import process_headroom
from sandstack.spec.resolve import (
    UnknownProfile,
    decode_egress,
    effective_limits,
    effective_user,
    effective_writable,
    inherited,
)
from sandstack.spec.units import decimal_size_advice, format_cpus, format_size


# Paths sandstack mounts into every sandbox; a writable path there would hide or break the mount.
RESERVED_PATHS = {
    SECRETS_DIR: "where secret files are mounted read-only",
    RUN_DIR: "where sandstack mounts the host guard's state",
}
NUMERIC_USER = re.compile(r"^[0-9]+(:[0-9]+)?$")
MIB = 1024 * 1024
MIN_MEMORY = 6 * MIB


@dataclass
class Context:
    doc: Document
    stack: Stack
    source: Path

    def error(self, path: JsonPath, message: str, rule: str, *, key: bool = False) -> Diagnostic:
        return self.doc.diagnostic(path, message, rule, key=key)


Rule = Callable[[Context], Iterator[Diagnostic]]
RULES: dict[str, Rule] = {}


def rule(rule_id: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        RULES[rule_id] = fn
        fn.rule_id = rule_id  # type: ignore[attr-defined]
        return fn

    return register


def run_rules(ctx: Context) -> list[Diagnostic]:
    return [d for fn in RULES.values() for d in fn(ctx)]


def _templates(ctx: Context) -> Iterator[tuple[JsonPath, Template]]:
    for name, template in ctx.stack.templates.items():
        yield ("templates", name), template


def _placements(ctx: Context) -> Iterator[tuple[str, str, str, int]]:
    """(pool, template, host, replicas) for every pool whose references exist."""
    for pool_name, pool in ctx.stack.pools.items():
        if pool.template not in ctx.stack.templates:
            continue
        for host in dict.fromkeys(pool.hosts):
            if host in ctx.stack.hosts:
                yield pool_name, pool.template, host, pool.replicas


@rule("ref-template")
def pool_template_exists(ctx: Context) -> Iterator[Diagnostic]:
    known = ", ".join(ctx.stack.templates)
    for name, pool in ctx.stack.pools.items():
        if pool.template not in ctx.stack.templates:
            yield ctx.error(("pools", name, "template"), f"template {pool.template!r} is not defined; templates: {known}",
                            "ref-template")


@rule("ref-host")
def pool_hosts_exist(ctx: Context) -> Iterator[Diagnostic]:
    known = ", ".join(ctx.stack.hosts)
    for name, pool in ctx.stack.pools.items():
        seen: set[str] = set()
        for i, host in enumerate(pool.hosts):
            if host not in ctx.stack.hosts:
                yield ctx.error(("pools", name, "hosts", i), f"host {host!r} is not defined; hosts: {known}", "ref-host")
            elif host in seen:
                yield ctx.error(("pools", name, "hosts", i), f"host {host!r} is listed twice", "ref-host")
            seen.add(host)


@rule("ref-profile")
def limits_profiles_exist(ctx: Context) -> Iterator[Diagnostic]:
    known = ", ".join(ctx.stack.profiles) or "none defined"
    owners = [(("defaults",), ctx.stack.defaults.limits)] + [(p, t.limits) for p, t in _templates(ctx)]
    for path, limits in owners:
        name, where = (limits, path + ("limits",)) if isinstance(limits, str) else (
            getattr(limits, "profile", None), path + ("limits", "profile"))
        if name is not None and name not in ctx.stack.profiles:
            yield ctx.error(where, f"profile {name!r} is not defined; profiles: {known}", "ref-profile")


@rule("host-endpoint")
def host_endpoint_matches_transport(ctx: Context) -> Iterator[Diagnostic]:
    for name, host in ctx.stack.hosts.items():
        scheme = host.endpoint.split("://", 1)[0]
        if scheme == "tcp" and host.tls is None:
            yield ctx.error(("hosts", name, "endpoint"),
                            f"{host.endpoint!r} needs `tls` (ca, cert, key): a Docker daemon on plain tcp is open "
                            "to anyone who can reach it", "host-endpoint")
        if scheme != "tcp" and host.tls is not None:
            yield ctx.error(("hosts", name, "tls"), f"`tls` applies only to tcp:// endpoints, not {scheme}://",
                            "host-endpoint", key=True)
        if scheme != "ssh" and host.ssh_opts:
            yield ctx.error(("hosts", name, "ssh_opts"), f"`ssh_opts` applies only to ssh:// endpoints, not {scheme}://",
                            "host-endpoint", key=True)


@rule("egress-entry")
def egress_entries_well_formed(ctx: Context) -> Iterator[Diagnostic]:
    for path, policy in _policies(ctx):
        for kind in ("allow", "deny"):
            for i, entry in enumerate(getattr(policy, kind)):
                try:
                    parse_entry(entry)
                except EgressEntryError as exc:
                    yield ctx.error(path + (kind, i), str(exc), "egress-entry")


def _policies(ctx: Context) -> Iterator[tuple[JsonPath, NetworkPolicy]]:
    if ctx.stack.defaults.network is not None:
        yield ("defaults", "network"), ctx.stack.defaults.network
    for path, template in _templates(ctx):
        if template.network is not None:
            yield path + ("network",), template.network


@rule("egress-mode")
def egress_fields_fit_mode(ctx: Context) -> Iterator[Diagnostic]:
    for path, policy in _policies(ctx):
        mode = policy.egress
        outbound, _ = decode_egress(mode, policy.log, policy.protocols)
        if policy.allow and mode != "allow-list":
            yield ctx.error(path + ("allow",), f"`allow` entries need `egress: allow-list`; this policy is {mode!r}",
                            "egress-mode", key=True)
        if mode == "allow-list" and not policy.allow:
            yield ctx.error(path + ("egress",), "'allow-list' with no `allow` entries allows nothing: list the "
                            "destinations, or use 'deny-all'", "egress-mode")
        if policy.deny and mode == "deny-all":
            yield ctx.error(path + ("deny",), "`deny` entries narrow what is allowed, but nothing is allowed in "
                            "'deny-all'", "egress-mode", key=True)
        if outbound == "direct":
            yield from _direct_deny_entries(ctx, path, policy)
        if mode == "allow-list" and policy.log is False:
            yield ctx.error(path + ("log",), "'allow-list' egress always goes through the gateway, which logs every "
                            "request: remove `log: false` (only 'allow-all' has an unlogged, direct mode)",
                            "egress-mode", key=True)
        if mode == "deny-all" and policy.log:
            yield ctx.error(path + ("log",), "'deny-all' has no egress to log: remove `log`", "egress-mode", key=True)
        if policy.protocols is not None and (mode != "allow-all" or policy.log is False):
            yield ctx.error(path + ("protocols",), "`protocols` chooses how logged 'allow-all' egress leaves (through "
                            f"the gateway, or direct with every connection logged); this policy is {mode!r}"
                            + (" with `log: false`" if policy.log is False else "") + ": remove `protocols`",
                            "egress-mode", key=True)
        if "connections" in policy.model_fields_set and outbound != "direct":
            route = "leaves through the gateway, which bounds its connections" if outbound == "gateway" else "has none"
            yield ctx.error(path + ("connections",), "`connections` bounds a direct route (unlogged 'allow-all' or "
                            f"`protocols: any`); this policy's egress {route}: remove `connections`",
                            "egress-mode", key=True)
        if mode == "deny-all" and policy.allow_metadata:
            yield ctx.error(path + ("allow_metadata",), "'deny-all' reaches no address, link-local or other: remove "
                            "`allow_metadata`, or pick 'allow-list' or 'allow-all'", "egress-mode", key=True)


def _direct_deny_entries(ctx: Context, path: JsonPath, policy: NetworkPolicy) -> Iterator[Diagnostic]:
    """Unlogged 'allow-all' has no gateway: the host guard's firewall enforces `deny`, and a firewall sees
    addresses, never the names a connection was made for."""
    for i, entry in enumerate(policy.deny):
        try:
            kind = parse_entry(entry).kind
        except EgressEntryError:
            continue  # reported by egress-entry
        if kind != "cidr":
            yield ctx.error(path + ("deny", i), f"{entry!r}: a domain deny needs the gateway to see names; with "
                            "`log: false` or `protocols: any` the sandbox connects directly, so only addresses and CIDRs can be denied, "
                            "optionally with a port (e.g. '203.0.113.7', '10.0.0.0/8:443'); or send egress through "
                            "the gateway (`log: true` with `protocols: http`)", "egress-mode")


@rule("egress-metadata")
def allow_entries_outside_metadata(ctx: Context) -> Iterator[Diagnostic]:
    """An allow entry wholly inside METADATA_RANGES allows nothing while `allow_metadata` is false: the gateway
    and the guard refuse those addresses first. Say so here rather than leave a silently dead entry."""
    for path, policy in _policies(ctx):
        if policy.allow_metadata:
            continue
        for i, entry in enumerate(policy.allow):
            blocked = _metadata_range(entry)
            if blocked is not None:
                yield ctx.error(path + ("allow", i), f"{entry!r} is inside {blocked}, which every mode refuses "
                                "(cloud metadata and link-local addresses) unless `allow_metadata: true`: set it, "
                                "a reviewable loosening, or remove the entry", "egress-metadata")


def _metadata_range(entry: str) -> str | None:
    try:
        parsed = parse_entry(entry)
    except EgressEntryError:
        return None  # reported by egress-entry
    if parsed.kind != "cidr":
        return None
    network = ipaddress.ip_network(parsed.value)
    for blocked in METADATA_RANGES:
        candidate = ipaddress.ip_network(blocked)
        if network.version == candidate.version and network.subnet_of(candidate):  # type: ignore[arg-type]
            return blocked
    return None


@rule("base-image")
def base_image_set(ctx: Context) -> Iterator[Diagnostic]:
    for path, template in _templates(ctx):
        if template.base_image is None:
            yield ctx.error(path, f"template {path[-1]!r} has no `base_image`: set it, or inherit one from the "
                            "template it `extends` or from `defaults`", "base-image")


@rule("snapshot-version")
def snapshot_version_with_setup(ctx: Context) -> Iterator[Diagnostic]:
    for path, template in _templates(ctx):
        snap = template.snapshot
        if (snap.setup or snap.files) and snap.version is None:
            yield ctx.error(path + ("snapshot",), "`snapshot.version` is required when there are setup steps or "
                            "files: bump it to force a rebuild, e.g. version: '1'", "snapshot-version")


@rule("snapshot-file")
def snapshot_files_exist(ctx: Context) -> Iterator[Diagnostic]:
    base = ctx.source.parent.resolve()
    for path, template in _templates(ctx):
        for i, item in enumerate(template.snapshot.files):
            where = path + ("snapshot", "files", i, "source")
            target = (base / item.source).resolve()
            if base not in target.parents:
                yield ctx.error(where, f"{item.source!r} resolves outside the stack file's folder {str(base)!r}",
                                "snapshot-file")
            elif not target.is_file():
                yield ctx.error(where, f"{item.source!r} is not a file (looked in {str(base)!r})", "snapshot-file")


DATA_MAX_BYTES = 64 * 1024**2  # per template: data is uploaded through the provider's state, not a registry
DATA_MAX_FILES = 1000


@rule("data-source")
def data_sources(ctx: Context) -> Iterator[Diagnostic]:
    base = ctx.source.parent.resolve()
    for path, template in _templates(ctx):
        total, count, seen = 0, 0, set()
        for i, item in enumerate(template.data):
            where = path + ("data", i)
            target = (base / item.source).resolve()
            if base not in target.parents:
                yield ctx.error(where + ("source",), f"{item.source!r} resolves outside the stack file's folder "
                                f"{str(base)!r}", "data-source")
                continue
            if not target.exists():
                yield ctx.error(where + ("source",), f"{item.source!r} is neither a file nor a folder (looked in "
                                f"{str(base)!r})", "data-source")
                continue
            files = [target] if target.is_file() else [p for p in target.rglob("*") if p.is_file()]
            total += sum(p.stat().st_size for p in files)
            count += len(files)
            if item.path in seen or item.path == "/" or item.path == SECRETS_DIR or \
                    item.path.startswith(SECRETS_DIR + "/"):
                yield ctx.error(where + ("path",), f"{item.path!r} is taken (another data mount, the root or the "
                                "secrets folder): mount data at a path of its own, e.g. '/opt/skills'", "data-source")
            seen.add(item.path)
        if total > DATA_MAX_BYTES or count > DATA_MAX_FILES:
            yield ctx.error(path + ("data",), f"data mounts hold {count} files of {total} bytes; at most "
                            f"{DATA_MAX_FILES} files and {DATA_MAX_BYTES // 1024**2}MiB per template (use a volume "
                            "or the snapshot image for more)", "data-source")


@rule("unique-host-port")
def host_ports_unique(ctx: Context) -> Iterator[Diagnostic]:
    claims: dict[tuple[str, int, str], list[tuple[JsonPath, str]]] = defaultdict(list)
    for pool, template_name, host, replicas in _placements(ctx):
        for i, port in enumerate(ctx.stack.templates[template_name].ports):
            if port.host_port is None or port.exposure == "none" or replicas == 0:
                continue
            where = ("templates", template_name, "ports", i, "host_port")
            # Every replica binds the same port, so replicas > 1 on one host collide with each other.
            claims[(host, port.host_port, port.protocol)].extend([(where, pool)] * replicas)
    for (host, number, protocol), owners in claims.items():
        if len(owners) > 1:
            pools = sorted({pool for _, pool in owners})
            who = (f"{len(owners)} replicas of pool {pools[0]!r}" if len(pools) == 1
                   else "pools " + ", ".join(repr(p) for p in pools))
            for where in dict.fromkeys(w for w, _ in owners):
                yield ctx.error(where, f"host port {number}/{protocol} on host {host!r} is claimed by {who}; "
                                "one sandbox per host can own a fixed port (drop `host_port` to let Docker pick)",
                                "unique-host-port")


@rule("unique-ports")
def container_ports_unique(ctx: Context) -> Iterator[Diagnostic]:
    for path, template in _templates(ctx):
        seen: set[tuple[int, str]] = set()
        for i, port in enumerate(template.ports):
            if (port.port, port.protocol) in seen:
                yield ctx.error(path + ("ports", i, "port"), f"port {port.port}/{port.protocol} is declared twice",
                                "unique-ports")
            seen.add((port.port, port.protocol))
            if port.host_port is not None and port.exposure == "none":
                yield ctx.error(path + ("ports", i, "host_port"), "`host_port` needs exposure 'host' or 'public'; "
                                "exposure 'none' publishes nothing", "unique-ports")


@rule("host-capacity")
def pools_fit_hosts(ctx: Context) -> Iterator[Diagnostic]:
    need: dict[str, dict[str, list[tuple[str, int, float]]]] = defaultdict(lambda: defaultdict(list))
    for pool, template_name, host, replicas in _placements(ctx):
        try:
            limits = effective_limits(ctx.stack, ctx.stack.templates[template_name])
        except UnknownProfile:
            continue
        for dim in ("cpus", "memory", "disk"):
            need[host][dim].append((pool, replicas, getattr(limits, dim)))
    show = {"cpus": format_cpus, "memory": format_size, "disk": format_size}
    for host, dims in need.items():
        spec = ctx.stack.hosts[host]
        for dim, parts in dims.items():
            total = sum(r * each for _, r, each in parts)
            ratio = getattr(spec.overcommit, dim)
            allowed = getattr(spec.capacity, dim) * ratio
            if total > allowed + 1e-9:
                fmt = show[dim]
                detail = ", ".join(f"{p}: {r} × {fmt(e)}" for p, r, e in parts)
                yield ctx.error(("hosts", host, "capacity", dim),
                                f"pools on host {host!r} need {fmt(total)} of {dim} ({detail}) but capacity "
                                f"{fmt(getattr(spec.capacity, dim))} × overcommit {ratio:g} allows {fmt(allowed)}",
                                "host-capacity")


@rule("gpu-host")
def gpus_where_hosts_have_them(ctx: Context) -> Iterator[Diagnostic]:
    used: dict[tuple[str, str | None], int] = defaultdict(int)
    for pool, template_name, host, replicas in _placements(ctx):
        try:
            gpus = effective_limits(ctx.stack, ctx.stack.templates[template_name]).gpus
        except UnknownProfile:
            continue
        if gpus is None:
            continue
        inventory = ctx.stack.hosts[host].capacity.gpus
        have = sum(g.count for g in inventory if gpus.type in (None, g.type))
        used[(host, gpus.type)] += gpus.count * replicas
        kind = f"{gpus.type} GPUs" if gpus.type else "GPUs"
        if have == 0:
            # A host with other GPU types must not read as a host with no GPUs at all.
            types = ", ".join(dict.fromkeys(g.type for g in inventory))
            has = f"has only {types}" if inventory else "declares none (`hosts.*.capacity.gpus`)"
            yield ctx.error(("pools", pool, "hosts", ctx.stack.pools[pool].hosts.index(host)),
                            f"template {template_name!r} requests {kind} but host {host!r} {has}", "gpu-host")
        elif used[(host, gpus.type)] > have:
            yield ctx.error(("pools", pool, "replicas"), f"pools on host {host!r} request "
                            f"{used[(host, gpus.type)]} {kind}; it has {have}", "gpu-host")


@rule("gpu-ids")
def gpu_ids_match_counts(ctx: Context) -> Iterator[Diagnostic]:
    for host, spec in ctx.stack.hosts.items():
        seen: dict[str, int] = {}
        for index, inventory in enumerate(spec.capacity.gpus):
            if inventory.ids is None:
                continue
            where = ("hosts", host, "capacity", "gpus", index, "ids")
            if len(inventory.ids) != inventory.count:
                yield ctx.error(where, f"{len(inventory.ids)} device ids for {inventory.count} {inventory.type} "
                                "GPUs: list exactly `count` ids", "gpu-ids")
            for position, device in enumerate(inventory.ids):
                if device in seen:
                    yield ctx.error((*where, position), f"device id {device!r} is listed twice on host {host!r}",
                                    "gpu-ids")
                seen[device] = index


@rule("disk-enforced")
def disk_limit_enforceable(ctx: Context) -> Iterator[Diagnostic]:
    for path, template in _templates(ctx):
        try:
            limits = effective_limits(ctx.stack, template)
        except UnknownProfile:
            continue
        # The same writable paths resolution gives the sandbox: an explicit `[]` is none, not '/tmp'.
        total = sum(w.size for w in effective_writable(ctx.stack, template))
        if total > limits.disk:
            yield ctx.error(path + ("filesystem",), f"writable paths add up to {format_size(total)}, more than "
                            f"`limits.disk` {format_size(limits.disk)}", "disk-enforced")
        if not inherited(ctx.stack, template, "filesystem", "read_only_root"):
            for pool, template_name, host, _ in _placements(ctx):
                if template_name == path[1] and not ctx.stack.hosts[host].storage_quota:
                    yield ctx.error(path + ("filesystem", "read_only_root"),
                                    f"a writable root cannot be held to `limits.disk` on host {host!r} (pool "
                                    f"{pool!r}): it has no `storage_quota`; keep the root read-only and declare "
                                    "writable paths", "disk-enforced")


@rule("writable-memory")
def tmpfs_leaves_memory_for_processes(ctx: Context) -> Iterator[Diagnostic]:
    """tmpfs writable paths and /dev/shm are charged to the sandbox's memory. If full ones can take all of
    `limits.memory`, a sandbox can wedge itself: each new process (an exec, a restarted command) is OOM-killed
    and nothing inside can run to free the space. Sizes are the resolved ones (built-ins, defaults, profiles)."""
    for path, template in _templates(ctx):
        try:
            memory = effective_limits(ctx.stack, template).memory
        except UnknownProfile:
            continue
        if memory < MIN_MEMORY or memory % MIB:
            continue  # reported by memory-unit
        writable = [w for w in effective_writable(ctx.stack, template) if w.type == "tmpfs"]
        shm = inherited(ctx.stack, template, "filesystem", "shm_size")
        total = sum(w.size for w in writable) + shm
        headroom = process_headroom(memory)
        if total + headroom <= memory:
            continue
        parts = ", ".join([*(f"{w.path} {format_size(w.size)}" for w in writable), f"/dev/shm {format_size(shm)}"])
        yield ctx.error(_writable_memory_place(path, template), f"writable paths and /dev/shm can hold "
                        f"{format_size(total)} ({parts}), leaving less than {format_size(headroom)} of "
                        f"`limits.memory` {format_size(memory)} for processes: tmpfs files are memory, so full paths "
                        "would get the sandbox's next process OOM-killed; shrink the paths or "
                        "`filesystem.shm_size`, or raise `limits.memory` to at least "
                        f"{format_size(total + headroom)}", "writable-memory")


def _writable_memory_place(path: JsonPath, template: Template) -> JsonPath:
    """The template's own `filesystem`, else its own `limits` (at `memory` if it sets one), else the template."""
    if template.filesystem is None and template.limits is not None:
        if getattr(template.limits, "memory", None) is not None:
            return path + ("limits", "memory")
        return path + ("limits",)
    return path + ("filesystem",)


@rule("writable-size")
def writable_paths_bounded(ctx: Context) -> Iterator[Diagnostic]:
    """tmpfs reads `size=0` as no limit at all: such a path would be bounded by nothing but memory."""
    owners = [(("defaults",), ctx.stack.defaults.filesystem)] + [(p, t.filesystem) for p, t in _templates(ctx)]
    for path, fs in owners:
        for i, w in enumerate((fs.writable or []) if fs else []):
            if w.size == 0:
                yield ctx.error(path + ("filesystem", "writable", i, "size"), f"size 0 would leave {w.path!r} "
                                "unbounded (tmpfs reads 0 as no limit): give it a size, e.g. '64MiB', or remove "
                                "the path", "writable-size")


@rule("unique-paths")
def sandbox_paths_distinct(ctx: Context) -> Iterator[Diagnostic]:
    owners = [(("defaults",), ctx.stack.defaults.filesystem)] + [(p, t.filesystem) for p, t in _templates(ctx)]
    for path, fs in owners:
        declared: set[str] = set()
        for i, w in enumerate((fs.writable or []) if fs else []):
            where = path + ("filesystem", "writable", i, "path")
            reserved = next((r for r in RESERVED_PATHS if w.path == r or w.path.startswith(r + "/")), None)
            if reserved is not None:
                yield ctx.error(where, f"{w.path!r} is inside {reserved!r}, {RESERVED_PATHS[reserved]}", "unique-paths")
            elif w.path in declared:
                yield ctx.error(where, f"{w.path!r} is declared twice", "unique-paths")
            declared.add(w.path)
    for path, template in _templates(ctx):
        seen: set[str] = set()
        for i, s in enumerate(template.secrets):
            if s.path in seen:
                yield ctx.error(path + ("secrets", i, "path"), f"{s.path!r} is declared twice", "unique-paths")
            seen.add(s.path)


@rule("secret-path")
def secrets_under_secrets_mount(ctx: Context) -> Iterator[Diagnostic]:
    for path, template in _templates(ctx):
        for i, s in enumerate(template.secrets):
            if not s.path.startswith(SECRETS_DIR + "/"):
                yield ctx.error(path + ("secrets", i, "path"), f"{s.path!r} must be under {SECRETS_DIR}/: secret "
                                f"files are delivered on a read-only mount there, e.g. '{SECRETS_DIR}/token'",
                                "secret-path")


@rule("secret-user")
def secrets_need_numeric_user(ctx: Context) -> Iterator[Diagnostic]:
    for path, template in _templates(ctx):
        user = effective_user(ctx.stack, template)
        if template.secrets and not NUMERIC_USER.match(user):
            where = path + ("user",) if template.user else ("defaults", "user")
            yield ctx.error(where, f"user {user!r} must be numeric ('uid' or 'uid:gid') in a template with "
                            "secrets: the files are owned by that uid before the image's user names are known",
                            "secret-user")


@rule("subnet-pool")
def pools_fit_subnet_pool(ctx: Context) -> Iterator[Diagnostic]:
    pools_on: dict[str, set[str]] = defaultdict(set)
    gateway_on: set[str] = set()  # hosts with a gateway, whose egress network takes a /23 too
    for pool, template, host, _ in _placements(ctx):
        pools_on[host].add(pool)
        policy = ctx.stack.templates[template].network or ctx.stack.defaults.network or NetworkPolicy()
        if decode_egress(policy.egress, policy.log, policy.protocols)[0] == "gateway":
            gateway_on.add(host)
    for name, host in ctx.stack.hosts.items():
        where = ("hosts", name, "subnet_pool")
        try:
            network = ipaddress.IPv4Network(host.subnet_pool, strict=True)
        except ValueError as exc:
            loose = _loose_v4(host.subnet_pool)
            hint = f"; did you mean '{loose}'?" if loose else ""
            yield ctx.error(where, f"{host.subnet_pool!r} is not an IPv4 network ({exc}){hint}", "subnet-pool")
            continue
        if network.prefixlen > POOL_SUBNET_PREFIX:
            yield ctx.error(where, f"{host.subnet_pool!r} is smaller than one pool's /{POOL_SUBNET_PREFIX}: use a prefix "
                            f"of /{POOL_SUBNET_PREFIX} or shorter, e.g. '10.213.0.0/16'", "subnet-pool")
        elif len(pools_on[name]) + (name in gateway_on) > 2 ** (POOL_SUBNET_PREFIX - network.prefixlen):
            room, pools = 2 ** (POOL_SUBNET_PREFIX - network.prefixlen), len(pools_on[name])
            placed = f"{pools} pool{'s' if pools > 1 else ''}" + (
                " and the gateway's egress network" if name in gateway_on else "")
            yield ctx.error(where, f"{host.subnet_pool!r} has room for {room} pool network{'s' if room > 1 else ''} "
                            f"(/{POOL_SUBNET_PREFIX} each) but {placed} are placed on host {name!r}: use a larger "
                            "network", "subnet-pool")


def _loose_v4(text: str) -> str | None:
    try:
        return str(ipaddress.IPv4Network(text, strict=False))
    except ValueError:
        return None


@rule("capabilities-user")
def capabilities_need_root(ctx: Context) -> Iterator[Diagnostic]:
    """Docker gives a non-root process added capabilities only in its bounding set, never effective
    (moby#50083; measured on 20.10: `--user 2345 --cap-add CHOWN` leaves CapEff 0), so they cannot be
    enforced unless the sandbox runs as uid 0 (still read-only, no-new-privileges, only those caps)."""
    for path, template in _templates(ctx):
        sec = template.security
        caps = inherited(ctx.stack, template, "security", "capabilities")
        privileged = inherited(ctx.stack, template, "security", "privileged")
        user = effective_user(ctx.stack, template)
        sudo = inherited(ctx.stack, template, "security", "sudo")
        if caps and not privileged and not sudo and user.partition(":")[0] not in ("0", "root"):
            where = path + ("security", "capabilities") if sec and sec.capabilities is not None else (
                "defaults", "security", "capabilities")
            yield ctx.error(where, f"{list(caps)} cannot take effect for user {user!r}: Docker gives a non-root "
                            "user added capabilities only in its bounding set, never effective; run the template "
                            "as user '0:0' (it keeps only these capabilities, a read-only root and "
                            "no-new-privileges) or remove them", "capabilities-user")


@rule("sudo")
def sudo_for_a_non_root_user(ctx: Context) -> Iterator[Diagnostic]:
    for path, template in _templates(ctx):
        if not inherited(ctx.stack, template, "security", "sudo"):
            continue
        user = effective_user(ctx.stack, template)
        if user.partition(":")[0] in ("0", "root"):
            yield ctx.error(path + ("user",), f"`security.sudo` is for a non-root user, not {user!r}: root needs "
                            "no sudo; set a user such as '10001:10001' or drop sudo", "sudo")
        elif not user.partition(":")[0].isdigit():
            yield ctx.error(path + ("user",), f"`security.sudo` needs a numeric user ('uid:gid'), not {user!r}: "
                            "the snapshot adds its passwd entry", "sudo")
        if inherited(ctx.stack, template, "security", "no_new_privileges") is True and (
                (template.security and template.security.no_new_privileges is True)
                or (ctx.stack.defaults.security and ctx.stack.defaults.security.no_new_privileges is True)):
            yield ctx.error(path + ("security", "no_new_privileges"), "`security.sudo` needs setuid, which "
                            "`no_new_privileges: true` forbids: remove one of them", "sudo")


@rule("memory-unit")
def memory_in_whole_mebibytes(ctx: Context) -> Iterator[Diagnostic]:
    owners: list[tuple[JsonPath, object]] = [(("profiles", n), p) for n, p in ctx.stack.profiles.items()]
    owners.append((("defaults", "limits"), ctx.stack.defaults.limits))
    owners += [(p + ("limits",), t.limits) for p, t in _templates(ctx)]
    for path, limits in owners:
        memory = getattr(limits, "memory", None)
        if memory is None:
            continue
        if memory < MIN_MEMORY or memory % MIB:
            yield ctx.error(path + ("memory",), decimal_size_advice(
                _written(ctx, path + ("memory",)), memory, MIN_MEMORY, "Docker limits memory in whole MiB") or
                f"{format_size(memory)} cannot be enforced exactly: Docker limits memory in whole MiB, at least 6MiB",
                "memory-unit")
    # /dev/shm is sized in whole MiB too, and 0 would give Docker's default (64MiB) instead of none.
    filesystems = [(("defaults", "filesystem"), ctx.stack.defaults.filesystem)]
    filesystems += [(p + ("filesystem",), t.filesystem) for p, t in _templates(ctx)]
    for path, fs in filesystems:
        shm = fs.shm_size if fs is not None else None
        if shm is not None and (shm < MIB or shm % MIB):
            yield ctx.error(path + ("shm_size",), decimal_size_advice(
                _written(ctx, path + ("shm_size",)), shm, MIB, "Docker sizes /dev/shm in whole MiB") or
                f"{format_size(shm)} cannot be enforced exactly: Docker sizes /dev/shm in whole MiB, at least 1MiB",
                "memory-unit")


def _written(ctx: Context, path: JsonPath) -> object:
    """The value at `path` as the file wrote it ('2GB'), before the models turned it into bytes."""
    node = ctx.doc.data
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
    return node


# The disk workspace and URL rules live beside these; importing them registers them after the ones above.
from sandstack.spec import rules_disk, rules_ingress  # noqa: E402,F401
