"""Container-level rules, written once over plain facts of a container, so that `sandstack check` (facts from
the sandbox plan) and the CrossGuard pack (facts from the inputs `pulumi preview` sees) enforce the same thing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandstack.plan.sandbox import EXPOSURE_BIND, SandboxPlan
from sandstack.spec.resolve import SUDO_CAPABILITIES


@dataclass(frozen=True)
class ContainerFacts:
    privileged: bool
    capabilities: tuple[str, ...]
    user: str
    no_new_privileges: bool
    read_only_root: bool
    runtime: str
    public_ports: tuple[int, ...]  # published on all the host's interfaces
    gpus: int  # 0 when none
    # `exposure: url` ports its host's ingress serves on all the host's interfaces: as public as a published port
    # (SBX-PORT-001 holds both to `public_ports`), with their own fix. Not published by the container itself, so
    # the CrossGuard pack reads them from the ingress container (sandstack.policy.crossguard).
    url_ports: tuple[int, ...] = ()


@dataclass(frozen=True)
class ContainerPolicy:
    capabilities: tuple[str, ...] = ()
    public_ports: tuple[int, ...] = ()
    writable_root: bool = False
    untrusted: bool = False
    max_gpus: int = 8
    sudo: bool = False  # an allowed `security.sudo`: its capabilities and no_new_privileges off are expected


def facts_of_plan(plan: SandboxPlan) -> ContainerFacts:
    return ContainerFacts(
        privileged=plan.privileged, capabilities=tuple(plan.capability_adds), user=plan.user,
        no_new_privileges=bool(plan.security_opts and "no-new-privileges:true" in plan.security_opts),
        read_only_root=plan.read_only, runtime=plan.runtime,
        public_ports=tuple(p.internal for p in plan.ports if p.ip == EXPOSURE_BIND["public"]),
        gpus=len(plan.gpu_device_ids or ()), url_ports=plan.public_urls)


def facts_of_inputs(props: dict[str, Any]) -> ContainerFacts:
    """From a docker:index/container:Container's inputs as a policy pack sees them (camelCase)."""
    caps = props.get("capabilities") or {}
    ports = props.get("ports") or []
    requests = props.get("deviceRequests") or []
    return ContainerFacts(
        privileged=bool(props.get("privileged")), capabilities=tuple(caps.get("adds") or ()),
        user=str(props.get("user") or ""),
        no_new_privileges="no-new-privileges:true" in (props.get("securityOpts") or []),
        read_only_root=bool(props.get("readOnly")), runtime=str(props.get("runtime") or "runc"),
        public_ports=tuple(int(p["internal"]) for p in ports if p.get("ip", "0.0.0.0") == EXPOSURE_BIND["public"]),
        # A device request for GPUs; count -1 is "all of the host's".
        gpus=sum(len(r["deviceIds"]) if r.get("deviceIds") else 99 if int(r.get("count", 0)) < 0
                 else int(r.get("count", 0)) for r in requests if "gpu" in (r.get("capabilities") or [])))


def facts_of_body(body: dict[str, Any]) -> ContainerFacts:
    """From a Docker Engine API `POST /containers/create` body: what the runtime sends for an on-demand sandbox
    (its recipe, sandstack.plan.ondemand), judged as the warm sandboxes' plan is."""
    host = body.get("HostConfig") or {}
    bindings = host.get("PortBindings") or {}
    requests = host.get("DeviceRequests") or []
    return ContainerFacts(
        privileged=bool(host.get("Privileged")), capabilities=tuple(host.get("CapAdd") or ()),
        user=str(body.get("User") or ""), no_new_privileges="no-new-privileges:true" in (host.get("SecurityOpt") or []),
        read_only_root=bool(host.get("ReadonlyRootfs")), runtime=str(host.get("Runtime") or "runc"),
        public_ports=tuple(int(port.split("/")[0]) for port, binds in bindings.items()
                           if any(b.get("HostIp", "") in ("", EXPOSURE_BIND["public"]) for b in binds or [{}])),
        # A device request for GPUs (capabilities are a list of alternatives); count -1 is "all of the host's".
        gpus=sum(len(r["DeviceIDs"]) if r.get("DeviceIDs") else 99 if int(r.get("Count", 0)) < 0
                 else int(r.get("Count", 0)) for r in requests
                 if any("gpu" in alternative for alternative in r.get("Capabilities") or [])))


def _root(user: str) -> bool:
    return user == "" or user.split(":", 1)[0] in ("0", "root")


# The fix for a public url port: its URL is public because the host's ingress is (`exposure: host` would trade the
# URL for a loopback port, which is not what a url port is for).
URL_PORT_REMEDIATION = ("Serve the host's URLs on its loopback only (`ingress.exposure: host`, behind your own proxy "
                        "or tunnel), or add the port to `policy.public_ports` after review.")


def url_port_violation(ports: tuple[int, ...], policy: ContainerPolicy) -> tuple[str, str, str, str] | None:
    """SBX-PORT-001 on url ports served publicly, or None: shared by `check` and the pack's ingress reading."""
    bad = sorted(set(ports) - set(policy.public_ports))
    if not bad:
        return None
    return ("SBX-PORT-001", "ports", f"must not serve port(s) {', '.join(map(str, bad))} publicly at its URL "
            f"(allowed: {', '.join(map(str, policy.public_ports)) or 'none'})", URL_PORT_REMEDIATION)


def container_violations(facts: ContainerFacts, policy: ContainerPolicy) -> list[tuple[str, str, str, str | None]]:
    """(rule id, field in words, message, remediation or None for the rule's own) of each container-level rule
    the facts break."""
    out = []
    if facts.privileged:
        out.append(("SBX-PRIV-001", "security.privileged", "must not run privileged", None))
    allowed = set(policy.capabilities) | (set(SUDO_CAPABILITIES) if policy.sudo else set())
    extra = sorted(set(facts.capabilities) - allowed)
    if extra:
        out.append(("SBX-PRIV-002", "security.capabilities",
                    f"must not add capabilities outside the allowed set: {', '.join(extra)}", None))
    if _root(facts.user):
        out.append(("SBX-PRIV-003", "user", f"must not run as root (user {facts.user or 'unset'})", None))
    if not facts.no_new_privileges and not policy.sudo:
        out.append(("SBX-PRIV-004", "security.no_new_privileges", "must keep no_new_privileges on", None))
    if not facts.read_only_root and not policy.writable_root:
        out.append(("SBX-PRIV-005", "filesystem.read_only_root", "must keep a read-only root filesystem", None))
    if policy.untrusted and facts.runtime != "runsc":
        out.append(("SBX-PRIV-006", "runtime", f"must use the runsc runtime for untrusted code, not {facts.runtime}",
                    None))
    bad_ports = sorted(set(facts.public_ports) - set(policy.public_ports))
    if bad_ports:
        out.append(("SBX-PORT-001", "ports", "must not expose port(s) "
                    f"{', '.join(map(str, bad_ports))} publicly (allowed: "
                    f"{', '.join(map(str, policy.public_ports)) or 'none'})", None))
    url = url_port_violation(facts.url_ports, policy)
    if url:
        out.append(url)
    if facts.gpus and facts.privileged:
        out.append(("SBX-GPU-001", "limits.gpus", "must not combine GPUs with privileged", None))
    if facts.gpus > policy.max_gpus:
        out.append(("SBX-GPU-002", "limits.gpus", f"must request at most {policy.max_gpus} GPUs, not {facts.gpus}",
                    None))
    return out
