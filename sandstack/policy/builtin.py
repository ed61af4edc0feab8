"""The built-in rules: their catalogue (IDs, names, descriptions, severities, remediation) and the checks that
read the resolved stack and its plan. Container-level checks live in `containers` (shared with CrossGuard)."""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from typing import Iterator

from sandstack.plan.snapshot import build_inputs
from sandstack.plan.stack import plan_stack
from sandstack.policy.containers import (ContainerFacts, ContainerPolicy, container_violations, facts_of_body,
                                         facts_of_plan)
from sandstack.policy.credentials import check_credentials
from sandstack.policy.findings import Rule, Violation
from sandstack.spec.addresses import lock_path
from sandstack.spec.egress import METADATA_RANGES, PRIVATE_RANGES
from sandstack.spec.models import Policy
from sandstack.spec.resolve import ResolvedStack
from sandstack.spec.units import format_cpus, format_duration, format_size

R = Rule
RULES: dict[str, Rule] = {r.id: r for r in (
    R("SBX-PRIV-001", "no-privileged", "Checks whether a template runs privileged.", "error",
      "Remove `security.privileged`; add only the capabilities the workload needs."),
    R("SBX-PRIV-002", "allowed-capabilities", "Checks whether a template adds capabilities outside `policy.capabilities`.",
      "error", "Drop the capability, or add it to `policy.capabilities` after review."),
    R("SBX-PRIV-003", "no-root-user", "Checks whether a template runs as root.", "error",
      "Set `user` to an unprivileged uid:gid such as '10001:10001'."),
    R("SBX-PRIV-004", "no-new-privileges", "Checks whether a template turns `no_new_privileges` off.", "error",
      "Remove `security.no_new_privileges: false`."),
    R("SBX-PRIV-005", "read-only-root", "Checks whether a template has a writable root without being listed in "
      "`policy.writable_root`.", "error", "Keep the root read-only and declare writable paths instead."),
    R("SBX-PRIV-006", "untrusted-needs-runsc", "Checks whether every template of a stack marked `policy.untrusted` "
      "uses the runsc runtime.", "error", "Set `runtime: runsc` (gVisor must be installed on the hosts)."),
    R("SBX-PRIV-007", "no-sudo", "Checks whether a template lets its user sudo without being listed in "
      "`policy.sudo`.", "error", "Drop `security.sudo`, or list the template in `policy.sudo` after review."),
    R("SBX-LIM-001", "limits-under-ceilings", "Checks whether a template's cpus, memory and pids are under "
      "`policy.ceilings`.", "error", "Lower the limit or raise the ceiling after review."),
    R("SBX-LIM-002", "bounded-lifetime", "Checks whether every sandbox has a max lifetime under "
      "`policy.ceilings.max_lifetime`.", "error", "Set `lifecycle.max_lifetime`, e.g. '8h'."),
    R("SBX-NET-001", "no-allow-all-in-production", "Checks whether a production stack uses `allow-all` egress.",
      "error", "Use `egress: allow-list` with the destinations the workload needs."),
    R("SBX-NET-002", "egress-logged", "Checks whether egress that leaves the host is logged.", "error",
      "Remove `network.log: false` so the gateway logs every request."),
    R("SBX-NET-003", "no-private-destinations", "Checks whether allow lists name private, link-local or metadata "
      "addresses without `policy.private_egress`.", "error",
      "Remove the entry, or set `policy.private_egress: true` after review."),
    R("SBX-NET-004", "metadata-opt-in", "Checks whether a template opts in to the cloud metadata address.",
      "warning", "Remove `network.allow_metadata` unless the workload needs instance credentials."),
    R("SBX-PORT-001", "public-ports-allowed", "Checks whether public ports are in `policy.public_ports`.", "error",
      "Use `exposure: host`, or add the port to `policy.public_ports` after review."),
    R("SBX-IMG-001", "pinned-base-images", "Checks whether a production stack pins base images by digest.", "error",
      "Write the base image as 'name@sha256:<digest>'."),
    R("SBX-IMG-002", "allowed-registries", "Checks whether base images come from `policy.registries`.", "error",
      "Use an image from an allowed registry, or add the registry after review."),
    R("SBX-SEC-001", "no-plaintext-credentials", "Checks whether an env value or name looks like a credential "
      "(detect-secrets' plugins; a git commit id under a name such as GIT_COMMIT is not one).", "error",
      "Move the value to a Pulumi secret (`pulumi config set --secret KEY`) and refer to it as {secret: KEY}; "
      "rotate the credential, it is in the repository's history."),
    R("SBX-SEC-002", "secret-key-not-a-value", "Checks whether the config key of any secret reference (env, "
      "secret files, host TLS, ingress certificate, runtime token) looks like a pasted credential.", "error",
      "Use the config key's name (e.g. 'githubToken'), set the value with `pulumi config set --secret`, and "
      "rotate the pasted credential."),
    R("SBX-SEC-003", "no-credentials-in-spec-text", "Checks whether any other string of the spec (setup steps, "
      "commands, readiness argv, labels, descriptions, suppression reasons, names, …) looks like a credential, and "
      "whether a value beside an AWS access key id is its secret half.", "error",
      "Remove the credential: pass it as a secret (`env: {NAME: {secret: KEY}}` or `secrets:`) and read it at run "
      "time; rotate it, it is in the repository's history."),
    R("SBX-SEC-004", "no-credentials-in-shipped-files", "Checks whether a file the spec ships into sandboxes "
      "(`snapshot.files`, `data`) holds a line that looks like a credential.", "error",
      "Remove the credential from the file and deliver it with `secrets:` instead; rotate it."),
    R("SBX-SEC-005", "secret-named-env-is-a-secret", "Checks whether an env variable whose name says it holds a "
      "secret (`*_TOKEN`, `*_KEY`, `*_SECRET`, `*PASSWORD*`, …; README, 'Check a stack against policy') is given a "
      "plain value, which no scanner need recognise (a credential split across two variables).", "error",
      "Give it as `{secret: KEY}` (`pulumi config set --secret KEY`) and rotate the value, it is in the repository's "
      "history; a variable that holds no secret is better renamed, or its finding suppressed with the reason."),
    R("SBX-GPU-001", "no-gpu-with-privileged", "Checks whether a GPU request is combined with privileged.", "error",
      "Remove `security.privileged`: GPUs are attached through device requests."),
    R("SBX-GPU-002", "gpu-ceiling", "Checks whether GPU counts are under `policy.ceilings.gpus`.", "error",
      "Lower `limits.gpus.count` or raise the ceiling after review."),
    R("SBX-POL-001", "unused-suppression", "Checks whether every suppression of a stack matches a finding.",
      "warning", "Remove the suppression, or correct its rule ID or target."),
    R("SBX-ADDR-001", "addresses-locked", "Checks whether the stack's addresses are locked: an address lock "
      "(`<stack>.lock`, written by `sandstack lock`) beside the stack file.", "warning",
      "Run `sandstack lock <stack file>` and commit the lock beside it."),
    R("SBX-SNAP-001", "version-bumped", "Checks whether a snapshot's setup, files or base image changed without a "
      "version bump (with `--base`).", "error", "Bump `snapshot.version`."),
)}

# Where each container-level rule's field sits under a template (and under `defaults`).
FIELD_PATHS = {
    "security.privileged": ("security", "privileged"), "security.capabilities": ("security", "capabilities"),
    "user": ("user",), "security.no_new_privileges": ("security", "no_new_privileges"),
    "filesystem.read_only_root": ("filesystem", "read_only_root"), "runtime": ("runtime",), "ports": ("ports",),
    "limits.gpus": ("limits", "gpus"),
}
# What no sandbox reaches by default (sandstack.spec.egress): an allow entry naming it is the one way through.
PRIVATE = tuple(ipaddress.ip_network(n) for n in (*PRIVATE_RANGES, *METADATA_RANGES))


def template_path(spec: ResolvedStack, template: str, *rel: object) -> tuple:
    """Where a template's setting is written: its own key, else `defaults`' key, else the template."""
    own = ("templates", template, *rel)
    data = _written(spec)
    node: object = data
    for part in own:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            defaults = data.get("defaults", {})
            probe: object = defaults
            for p in rel:
                if isinstance(probe, dict) and p in probe:
                    probe = probe[p]
                else:
                    return own
            return ("defaults", *rel)
    return own


_written_last: list[tuple[ResolvedStack, dict]] = []  # the last spec dumped (a check reads one spec at a time)


def _written(spec: ResolvedStack) -> dict:
    """The stack as written (its set fields), dumped once per spec: every rule's finding asks where it is written
    (a dump of the 1,000-sandbox stack took ~2 ms, once per finding and per template). Read only."""
    if not _written_last or _written_last[0][0] is not spec:
        _written_last[:] = [(spec, spec.spec.model_dump(exclude_unset=True))]
    return _written_last[0][1]


def container_policy(policy: Policy, template: str) -> ContainerPolicy:
    return ContainerPolicy(capabilities=tuple(policy.capabilities), public_ports=tuple(policy.public_ports),
                           writable_root=template in policy.writable_root, untrusted=policy.untrusted,
                           max_gpus=policy.ceilings.gpus, sudo=template in policy.sudo)


def public_url_ports(spec: ResolvedStack, template: str) -> tuple[int, ...]:
    """A template's `exposure: url` ports when a public ingress serves them (`ingress.exposure: public` on a host
    one of its pools runs on): reachable from anywhere, so public to SBX-PORT-001 and to organisation rules'
    `public_ports` alike (docs/design/ingress.md). Behind loopback ingresses only, none are."""
    hosts = {h for pool in spec.pools.values() if pool.template == template for h in pool.hosts}
    if not any(spec.hosts[h].ingress and spec.hosts[h].ingress.exposure == "public" for h in hosts):
        return ()
    return tuple(p.port for p in spec.templates[template].ports if p.exposure == "url")


def check_containers(spec: ResolvedStack, policy: Policy) -> Iterator[Violation]:
    """The container-level rules on each template's containers, once per template: its first pool's first warm
    sandbox (the plan's node the components register) and, for a pool that may grow on demand, the first place's
    recipe (the Engine API body the runtime sends), on that pool's first host. A pool of no warm sandboxes is
    judged by its recipe alone: every container the runtime may create is held to the rules."""
    # Each pool on its first host only: the rest of the stack's pools are not read.
    plan = plan_stack(spec, "check", only={(name, pool.hosts[0]) for name, pool in spec.pools.items()})
    pools = {(p.pool, p.host): p for p in plan.pools.values()}
    found: dict[str, set[tuple]] = {}
    for pool_name, pool in spec.pools.items():
        t = spec.templates[pool.template]
        seen = found.setdefault(t.name, set())
        policy_of = container_policy(policy, t.name)
        url_ports = public_url_ports(spec, t.name)  # any host's ingress
        for facts in _pool_facts(plan, pools[(pool_name, pool.hosts[0])]):
            for rule, where, message, fix in container_violations(replace(facts, url_ports=url_ports), policy_of):
                if (rule, message) not in seen:
                    seen.add((rule, message))
                    yield Violation(rule, f"template/{t.name}", template_path(spec, t.name, *FIELD_PATHS[where]),
                                    f"Template '{t.name}' {message}.", fix)


def _pool_facts(plan, pool) -> Iterator[ContainerFacts]:
    """What a pool's containers are on its host: its first warm sandbox, its first on-demand place's recipe."""
    if pool.sandbox_plans:
        yield facts_of_plan(pool.sandbox_plans[0])
    runtime = plan.hosts[pool.host].runtime
    ondemand = runtime.config.pools[pool.pool].ondemand if runtime and pool.pool in runtime.config.pools else None
    if ondemand:
        yield facts_of_body(ondemand.body(next(iter(ondemand.places))))


def check_sudo(spec: ResolvedStack, policy: Policy) -> Iterator[Violation]:
    for name, t in spec.templates.items():
        if t.sudo and name not in policy.sudo:
            yield Violation("SBX-PRIV-007", f"template/{name}", template_path(spec, name, "security", "sudo"),
                            f"Template '{name}' must not let its user sudo.")


def check_limits(spec: ResolvedStack, policy: Policy) -> Iterator[Violation]:
    c = policy.ceilings
    for name, t in spec.templates.items():
        # Each amount in the units a spec writes it in ('64GiB', not 6.87195e+10 bytes).
        for field, value, ceiling, shown, words in (("cpus", t.limits.cpus, c.cpus, format_cpus, "CPUs"),
                                                    ("memory", t.limits.memory, c.memory, format_size, "of memory"),
                                                    ("pids", t.limits.pids, c.pids, str, "processes")):
            if value > ceiling:
                yield Violation("SBX-LIM-001", f"template/{name}", template_path(spec, name, "limits", field),
                                f"Template '{name}' must have at most {shown(ceiling)} {words}, not {shown(value)}.")
        life = t.lifecycle.max_lifetime
        if not life or life > c.max_lifetime:
            yield Violation("SBX-LIM-002", f"template/{name}", template_path(spec, name, "lifecycle", "max_lifetime"),
                            f"Template '{name}' must have a max lifetime of at most {format_duration(c.max_lifetime)}, "
                            f"not {format_duration(life) if life else 'unlimited'}.")
    # A size class is what a claim of it runs with: held to the same ceilings (a class set in the pool itself).
    for pool, p in spec.pools.items():
        for cls, size in (p.sizes or {}).items():
            for field, value, ceiling, shown, words in (("cpus", size.cpus, c.cpus, format_cpus, "CPUs"),
                                                        ("memory", size.memory, c.memory, format_size, "of memory"),
                                                        ("pids", size.pids, c.pids, str, "processes")):
                if value is not None and value > ceiling:
                    yield Violation("SBX-LIM-001", f"pool/{pool}", ("pools", pool, "sizes", cls, field),
                                    f"Size class '{cls}' of pool '{pool}' must have at most {shown(ceiling)} "
                                    f"{words}, not {shown(value)}.")


def _private(entry) -> bool:
    if entry.kind != "cidr":
        return entry.value in ("localhost",) or entry.value.endswith(".internal")
    network = ipaddress.ip_network(entry.value)
    return any(network.version == p.version and network.overlaps(p) for p in PRIVATE)


def check_network(spec: ResolvedStack, policy: Policy) -> Iterator[Violation]:
    """Every network policy of every template: its one `network`, or each of its network profiles (a session may be
    switched into any of them; docs/design/network-profiles.md), located where it is written."""
    for name, t in spec.templates.items():
        policies = [(("network",), "", t.network)] if not t.network_profiles else [
            (("network_profiles", "profiles", profile), f" (network profile '{profile}')", n)
            for profile, n in t.network_profiles]
        for at, which, n in policies:
            yield from _network_violations(spec, policy, name, at, which, n)


def _network_violations(spec: ResolvedStack, policy: Policy, name: str, at: tuple, which: str,
                        n) -> Iterator[Violation]:
    if policy.production and n.egress == "allow-all":
        yield Violation("SBX-NET-001", f"template/{name}", template_path(spec, name, *at, "egress"),
                        f"Template '{name}'{which} must not use allow-all egress in a production stack.")
    if n.egress != "deny-all" and not n.log:
        yield Violation("SBX-NET-002", f"template/{name}", template_path(spec, name, *at, "log"),
                        f"Template '{name}'{which} must log its egress (network.log is false).")
    if not policy.private_egress:
        for index, entry in enumerate(n.allow):
            if _private(entry):
                yield Violation("SBX-NET-003", f"template/{name}", template_path(spec, name, *at, "allow", index),
                                f"Template '{name}'{which} must not allow the private or link-local destination "
                                f"{entry}.")
    if n.allow_metadata:
        yield Violation("SBX-NET-004", f"template/{name}", template_path(spec, name, *at, "allow_metadata"),
                        f"Template '{name}'{which} opts in to the cloud metadata address.")


def _registry(image: str) -> str:
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return image.split("@")[0].rsplit(":", 1)[0] if "@" not in image else image.split("@")[0]
    return "docker.io/" + (image if rest else "library/" + image)


def check_images(spec: ResolvedStack, policy: Policy) -> Iterator[Violation]:
    for name, t in spec.templates.items():
        path = template_path(spec, name, "base_image")
        if policy.production and "@sha256:" not in t.base_image:
            yield Violation("SBX-IMG-001", f"template/{name}", path,
                            f"Template '{name}' must pin its base image by digest in a production stack.")
        if policy.registries is not None:
            repository = _registry(t.base_image)
            if not any(repository == r or repository.startswith(r.rstrip("/") + "/") for r in policy.registries):
                yield Violation("SBX-IMG-002", f"template/{name}", path,
                                f"Template '{name}' must use a base image from an allowed registry "
                                f"({', '.join(policy.registries) or 'none'}).")


def check_snapshots(spec: ResolvedStack, base: ResolvedStack | None) -> Iterator[Violation]:
    if base is None:
        return
    for name, t in spec.templates.items():
        if name not in base.templates:
            continue
        a, b = build_inputs(base.templates[name]), build_inputs(t)
        changed = [w for w, k in (("setup", "setup"), ("files", "files"), ("base image", "base_image")) if a[k] != b[k]]
        if changed and a["version"] == b["version"]:
            yield Violation("SBX-SNAP-001", f"template/{name}", template_path(spec, name, "snapshot", "version"),
                            f"Template '{name}' must bump snapshot.version: its {' and '.join(changed)} changed.")


def check_addresses(spec: ResolvedStack) -> Iterator[Violation]:
    if spec.addresses is None and any(p.hosts for p in spec.pools.values()):
        yield Violation("SBX-ADDR-001", "stack", ("pools",),
                        f"The stack's addresses are not locked: without {lock_path(spec.source.name)} beside it, a new "
                        "pool whose hashed subnet or gateway port collides with an existing pool's takes it and "
                        "replaces that pool's network and sandboxes.")


def builtin_violations(spec: ResolvedStack, policy: Policy, base: ResolvedStack | None = None) -> list[Violation]:
    return [*check_containers(spec, policy), *check_sudo(spec, policy), *check_limits(spec, policy),
            *check_network(spec, policy), *check_images(spec, policy), *check_credentials(spec),
            *check_snapshots(spec, base), *check_addresses(spec)]

