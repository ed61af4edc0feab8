"""`sandstack preview`: the resources of one spec as a tree (text), markdown or stable JSON."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any, Callable

from rich.console import Console
from rich.tree import Tree

from sandstack.plan.resolver import GATEWAY_RESOLVER
from sandstack.review.resources import Resource
from sandstack.spec.roles import HOST_ROLES, HostRoleInfo, check_complete, parts_of
from sandstack.spec.units import format_cpus, format_size

FORMAT_VERSION = 1


def _limit_s(seconds: int, none: str) -> str:
    """A lifecycle limit in seconds; 0 is no limit, which takes a word and no unit ('unlimited', not '0s')."""
    return f"{seconds}s" if seconds else none


def _limits(p: dict[str, Any]) -> str:
    parts = [f"cpus {p['cpus']}", f"memory {p['memory_mb']}MiB", f"open files {p['open_files']}"]
    if p.get("gpu_device_ids"):
        parts.append(f"gpus {', '.join(p['gpu_device_ids'])}")
    return ", ".join(parts)


def _mib(tmpfs_options: str) -> str:
    size = int(tmpfs_options.rsplit("size=", 1)[1].split(",")[0])
    return f"{size / 2**20:g}MiB"


def _env(env: dict[str, Any]) -> str:
    return ", ".join(f"{k}=<secret {v['secret']}>" if isinstance(v, dict) else f"{k}={v}" for k, v in env.items())


def summary(r: Resource) -> list[str]:
    """The key settings of a resource, one short line each (what a reviewer reads); none for a component."""
    return SUMMARY.get(r.kind, _name)(r.props) if r.props else []


def _name(p: dict[str, Any]) -> list[str]:
    return [p["name"]] if "name" in p else []


def _setup(e: dict[str, Any]) -> str:
    """The build's setup policy: what its steps reach, as a sandbox's egress reads."""
    if e["mode"] == "none":
        return "setup steps without a network (setup_network: none)"
    return (f"setup steps under egress {e['mode']}"
            + (f" (profile {e['profile']})" if e.get("profile") else "")
            + f" ({e['outbound']}, {'logged' if e['log'] else 'not logged'}) on network {e['network']}"
            + (f"; allow {', '.join(e['allow'])}" if e["allow"] else "")
            + (f"; deny {', '.join(e['deny'])}" if e["deny"] else ""))


def _sandbox(p: dict[str, Any]) -> list[str]:
    egress = p["egress"]
    lines = [
        f"image {p['image']}", f"limits: {_limits(p)}, pids {p['pids']} (set by the guard)",
        f"runtime {p['runtime']}, user {p['user']}, read-only root {str(p['read_only']).lower()}, "
        f"privileged {str(p['privileged']).lower()}, no-new-privileges {str(bool(p['security_opts'])).lower()}",
        f"egress {egress['mode']} ({egress['outbound']}, {'logged' if egress['log'] else 'not logged'})"
        + (f"; allow {', '.join(egress['allow'])}" if egress["allow"] else "")
        + (f"; deny {', '.join(egress['deny'])}" if egress["deny"] else ""),
    ]
    if p.get("platform"):
        lines.append(f"platform {p['platform']}")
    if p["capability_adds"]:
        lines.append("capabilities " + ", ".join(p["capability_adds"]))
    for port in p["ports"]:
        exposure = "public" if port["ip"] == "0.0.0.0" else "host"
        lines.append(f"port {port['internal']}/{port['protocol']} {exposure} on {port['ip']}:"
                     f"{port['external'] or '<any>'}")
    for port, url in p.get("urls", {}).items():
        # public_urls: the url ports the host's ingress serves on all its interfaces, the others on its loopback.
        reach = "public" if int(port) in p["public_urls"] else "on the host's loopback"
        lines.append(f"port {port}/tcp url {url} ({reach})")
    writable = [f"{path} ({_mib(opts)})" for path, opts in p["tmpfs"].items()]
    writable += [f"{w['path']} (disk {w['size'] / 2**20:g}MiB{', seeded' if w['seed'] else ''})"
                 for w in p["workspaces"]]
    lines.append("writable " + (", ".join(writable) or "none"))
    life = p["lifecycle"]
    lines.append(f"lifecycle: max {_limit_s(life['max_lifetime'], 'unlimited')}, "
                 f"idle {_limit_s(life['idle_timeout'], 'never')}, on expiry {life['on_expiry']}")
    if p["env"]:
        lines.append("env " + _env(p["env"]))
    if p["secret_files"]:
        lines.append("secret files " + ", ".join(f"{path} ← <secret {key}>"
                                                   for path, key in p["secret_files"].items()))
    if p.get("data"):
        lines.append("read-only data at " + ", ".join(p["data"]))
    return lines


def _logger(p: dict[str, Any]) -> list[str]:
    lines = [f"every new connection of pools {', '.join(p['logged_pools'])}, logged before it passes "
             f"(NFQUEUE queue {p['queue']})"] if p["logged_pools"] else []
    if p.get("resolvers"):
        upstream = ", ".join(p["upstream"]) or "the host's own"
        pools = [name for name in p["resolvers"] if name != GATEWAY_RESOLVER]
        gateway = " and of the gateway" if GATEWAY_RESOLVER in p["resolvers"] else ""
        lines.append(f"every name lookup of pools {', '.join(pools)}{gateway} (upstream servers: {upstream})")
    return lines


def _runtime(p: dict[str, Any]) -> list[str]:
    return [f"sessions API on {p['listen']} (token from secret {p['token']['secret']}), pools "
            + ", ".join(f"{k} ({v['sandboxes']})" for k, v in p["pools"].items())] + [
        f"token '{scope}' (secret {t['secret']}) acts only on pools {', '.join(p['token_pools'][scope])}"
        for scope, t in p.get("tokens", {}).items()] + [
        f"SSH and SFTP into sessions' sandboxes on {s['listen']} (a session's token or its claim's keys; host key "
        f"from secret {s['host_key']['secret']}; "
        + ("local forwards to the session's own sandbox" if s.get("forwarding") == "local" else "no forwarding")
        + f"; at most {s.get('max_connections_per_source')} connections per source address)"
        for s in ([p["ssh"]] if "ssh" in p else [])]


def _ingress(p: dict[str, Any]) -> list[str]:
    tls = p["tls"] if isinstance(p["tls"], str) else \
        "TLS from secrets " + ", ".join(v["secret"] for v in p["tls"].values())
    wake = p.get("wake")
    return [f"https://*.{p['domain']} on {p['listen']} ({tls}), {len(p['sites'])} URLs"] + (
        [f"a URL of a stopped sandbox wakes its session through the runtime at {wake['runtime']} (token derived "
         f"from secret {wake['token']['secret']})"] if wake else [])


def _provider(p: dict[str, Any]) -> list[str]:
    tls = " with TLS from secrets " + ", ".join(v["secret"] for v in p["tls"].values()) if p["tls"] else ""
    return [p["endpoint"] + tls]


def _pool(p: dict[str, Any]) -> list[str]:
    ceiling = p.get("max", p["replicas"])
    hibernated = (f", and up to {p['max_hibernated']} hibernated sessions in places of their own"
                  if "max_hibernated" in p else "")
    return [f"{p['replicas']} sandboxes" + (f", up to {ceiling} on demand" if ceiling > p["replicas"] else "")
            + hibernated] + [
        f"size class {name}: {format_cpus(c['cpus'])} CPUs, {format_size(c['memory'])} memory, "
        f"{format_size(c['disk'])} disk, {c['pids']} pids" for name, c in p.get("sizes", {}).items()]


# By kind: every host role's kind (checked against sandstack.spec.roles below) and a pool's, a template's or a
# host's; a pool's or a template's object without one shows its name.
SUMMARY: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "sandbox": _sandbox,
    "snapshot": lambda p: [f"{p['image']} (version {p['version'] or '-'}, digest {p['digest'][:12]})",
                           f"from {p['base_image']}, {len(p['setup'])} setup steps, {len(p['files'])} files"
                           + (f", for {p['platform']}" if p.get("platform") else "")]
                          + ([_setup(p["setup_egress"])] if "setup_egress" in p else []),
    "disk workspace": lambda p: [f"{p['name']}: {p['size'] / 2**20:g}MiB at {p['path']}"
                                 + (", seeded from the image" if p["seed"] else "")],
    "data loader": lambda p: [f"{len(p['files'])} files"],
    "data volume": lambda p: [f"{p['name']} at {p['path']} (read-only)"],
    "pool": _pool,
    "host": lambda p: [f"address {p['address']}"],
    "connection logger": _logger,
    "logger reload": lambda p: [f"configuration {p['configuration']}: resolvers of "
                                f"{', '.join(p.get('resolvers') or ()) or 'no pool'}"],
    "runtime": _runtime,
    "runtime reload": lambda p: [f"configuration {p['configuration']}: pools "
                                 + ", ".join(f"{k} ({v['sandboxes']})" for k, v in p["pools"].items())],
    "ingress": _ingress,
    "ingress reload": lambda p: [f"configuration {p['configuration']}: {len(p.get('sites') or ())} sites"],
    "guard": _name,
    "guard reload": lambda p: [
        f"configuration {p['configuration']}: {len(p['rules'])} firewall rules on {len(p['bridges'])} bridges, "
        f"{len(p['pids'])} pids limits, {len(p['lifecycle'])} lifecycle lines"],
    "gateway": _name,
    "gateway reload": lambda p: [
        f"configuration {p['configuration']}: pools " + ", ".join(f"{k} on :{v['port']}" for k, v in p["pools"].items())],
    "network": lambda p: [
        f"{p['name']} {p['subnet']} ({'internal' if p['internal'] else 'routed'}, outbound {p['outbound']}"
        + (f", gateway port {p['gateway_port']}" if p["gateway_port"] else "") + ")"],
    "provider": _provider,
    "infra image": lambda p: [
        p["image"] + (" (declared)" if p["declared"] else " (built from the package)")],
    # The host roles' volumes and their other networks: their Docker names.
    "guard state": _name, "gateway log": _name, "guard configuration": _name, "gateway configuration": _name,
    "logger configuration": _name, "ingress configuration": _name, "runtime configuration": _name, "connection log": _name, "runtime state": _name, "ingress data": _name,
    "egress network": _name,
    "ingress network": _name,
}


def check_roles(roles: dict[str, HostRoleInfo] = HOST_ROLES) -> None:
    """Every host role's kind has its summary (a role without one is refused, not shown bare)."""
    check_complete("sandstack.review.preview.SUMMARY", SUMMARY, set(parts_of(roles)), others=frozenset(
        {"sandbox", "snapshot", "disk workspace", "data loader", "data volume", "pool", "host"}))


check_roles()


def to_json(stack: str, source: str, resources: list[Resource]) -> str:
    data = {"format": FORMAT_VERSION, "stack": stack, "source": source,
            "resources": [r.to_json() for r in resources]}
    return json.dumps(data, sort_keys=True, indent=2) + "\n"


def _children(resources: list[Resource]) -> dict[str | None, list[Resource]]:
    out: dict[str | None, list[Resource]] = {}
    for r in resources:
        out.setdefault(r.parent, []).append(r)
    return out


def _grouped(children: list[Resource]) -> list[tuple[str, Resource]]:
    """(label, resource) per node: a pool's sandboxes that differ only by index read as one node."""
    out: list[tuple[str, Resource]] = []
    run: list[Resource] = []

    def flush() -> None:
        if len(run) > 1:
            out.append((f"[bold]sandboxes[/bold] {run[0].name} … {run[-1].name} ({len(run)}, alike)", run[0]))
        elif run:
            out.append((f"[bold]sandbox[/bold] {run[0].name}", run[0]))
        run.clear()

    for r in children:
        if r.kind == "sandbox" and run and summary(r) == summary(run[0]):
            run.append(r)
            continue
        flush()
        if r.kind == "sandbox":
            run.append(r)
        else:
            out.append((f"[bold]{r.kind}[/bold] {r.name}", r))
    flush()
    return out


def to_text(stack: str, source: str, resources: list[Resource], width: int = 120) -> str:
    children = _children(resources)

    def add(node: Tree, label: str, r: Resource) -> None:
        branch = node.add(label)
        for line in summary(r):
            branch.add(line, style="dim")
        for child_label, child in _grouped(children.get(r.key, [])):
            add(branch, child_label, child)

    root = Tree(f"stack [bold]{stack}[/bold] ({source})")
    for r in children.get(None, []):
        for label, child in _grouped(children.get(r.key, [])):
            add(root, label, child)
    buffer = StringIO()
    Console(file=buffer, width=width, no_color=True, highlight=False, markup=True).print(root)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"


def to_markdown(stack: str, source: str, resources: list[Resource]) -> str:
    children = _children(resources)
    lines = [f"### sandstack preview: stack `{stack}` (`{source}`)", ""]

    def add(label: str, r: Resource, depth: int) -> None:
        lines.append("  " * depth + "- " + label.replace("[bold]", "**").replace("[/bold]", "**"))
        lines.extend("  " * (depth + 1) + f"- {line}" for line in summary(r))
        for child_label, child in _grouped(children.get(r.key, [])):
            add(child_label, child, depth + 1)

    for r in children.get(None, []):
        for label, child in _grouped(children.get(r.key, [])):
            add(label, child, 0)
    return "\n".join(lines) + "\n"
