"""The CrossGuard side of the container-level rules (policies/crossguard/): validators over the inputs of every
`docker:index/container:Container` that `pulumi preview --policy-pack` sees, including containers a program
makes outside sandstack's components. The rules are `sandstack.policy.containers`', shared with `sandstack
check`; this module imports no pulumi_policy, so it is tested without the pack's blocking entry point.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Mapping

from sandstack.plan import types
from sandstack.plan.ingress import CADDYFILE_ENV, LISTEN_ITEM
from sandstack.plan.recipe import merge
from sandstack.plan.runtime_host import ENV_CONFIG_TEXT
from sandstack.plan.sandbox import EXPOSURE_BIND
from sandstack.policy.builtin import RULES
from sandstack.policy.containers import (ContainerPolicy, container_violations, facts_of_body, facts_of_inputs,
                                         url_port_violation)
from sandstack.spec.roles import HOST_ROLES

CONTAINER = types.CONTAINER
# sandstack's own host containers, which the sandbox rules do not fit: the guard needs root and host namespaces
# by design (docs/design), the connection logger NET_ADMIN in the host's network namespace
# (docs/design/egress-log.md), the runtime service the Docker socket (docs/design/runtime.md), the ingress proxy
# its public port (docs/design/ingress.md); these, the gateway and the seeders are checked by their own tests.
# They are known by where they sit in sandstack's component tree, which their URN spells out (`…::<stack
# type>$<host type>$<role type>$docker:index/container:Container::<name>`), never by a label: any program can
# label a container `sandstack.role=guard`. Every other container is checked.
HOST_ROLE_COMPONENTS = tuple(role.component for role in HOST_ROLES.values() if role.component)
# A pool's run-once seeders sit beside its sandboxes, so the pool's children are told apart by logical name.
POOL_SEEDERS = tuple(f"-{suffix}" for suffix in (types.SECRETS_SEEDER, types.DATA_SEEDER))
# The rules that apply to a container's inputs (the others read the spec).
CONTAINER_RULES = ("SBX-PRIV-001", "SBX-PRIV-002", "SBX-PRIV-003", "SBX-PRIV-004", "SBX-PRIV-005", "SBX-PRIV-006",
                   "SBX-PORT-001", "SBX-GPU-001", "SBX-GPU-002")
CONFIG_SCHEMA = {
    "capabilities": {"type": "array", "items": {"type": "string"}, "default": []},
    "publicPorts": {"type": "array", "items": {"type": "integer"}, "default": []},
    "writableRoot": {"type": "boolean", "default": False},
    "untrusted": {"type": "boolean", "default": False},
    "maxGpus": {"type": "integer", "default": 8},
    "sudo": {"type": "boolean", "default": False},
}
# One site of the ingress's Caddyfile (sandstack.plan.ingress.IngressPlan.caddyfile): the sandbox and its port.
_SITE = re.compile(r"^\treverse_proxy (\S+):([0-9]+)$", re.MULTILINE)


def type_chain(urn: str) -> tuple[str, ...]:
    """The types a URN names, outermost parent first and the resource's own last: the engine writes a child's URN
    as `urn:pulumi:STACK::PROJECT::<parent's types>$<type>::NAME` (the root stack's type is left out)."""
    parts = urn.split("::", 3)
    return tuple(parts[2].split("$")) if len(parts) == 4 else ()


def host_component(urn: str, name: str) -> str | None:
    """The type of sandstack's component that made this container as one of a host's own (guard, gateway, logger,
    runtime, ingress, a pool's seeders), or None for a sandbox or any other container."""
    chain = type_chain(urn)
    if len(chain) < 4 or chain[-1] != CONTAINER or chain[-4:-2] != (types.SANDBOX_STACK, types.SANDBOX_HOST):
        return None
    parent = chain[-2]
    if parent in HOST_ROLE_COMPONENTS or (parent == types.SANDBOX_POOL and name.endswith(POOL_SEEDERS)):
        return parent
    return None


def served_url_ports(props: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """What an ingress serves publicly: each sandbox (its Docker name) and the ports its URLs reach, from the
    Caddyfile and the listen address its reload container delivers (the ingress's configuration,
    sandstack.plan.ingress); {} when the ingress listens on the host's loopback only."""
    items = dict(str(item).partition("=")[::2] for item in props.get("envs") or [])
    if not items.get(LISTEN_ITEM, "").startswith(EXPOSURE_BIND["public"] + ":"):
        return {}
    served: dict[str, tuple[int, ...]] = {}
    for upstream, port in _SITE.findall(items.get(CADDYFILE_ENV, "")):
        served[upstream] = (*served.get(upstream, ()), int(port))
    return served


def ondemand_bodies(props: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """What a runtime container may create: each on-demand place (its Docker name) and the Engine API body of its
    create call, from the recipes in the runtime's configuration (its environment, sandstack.plan.runtime_host).
    Read as plain JSON: a pack checks what is there, and a configuration the runtime would refuse is no excuse."""
    for item in props.get("envs") or []:
        key, _, value = str(item).partition("=")
        if key != ENV_CONFIG_TEXT:
            continue
        try:
            pools = json.loads(value).get("pools") or {}
        except (ValueError, AttributeError):
            return {}
        bodies: dict[str, dict[str, Any]] = {}
        for pool in pools.values():
            ondemand = (pool or {}).get("ondemand") or {}
            for name, place in (ondemand.get("places") or {}).items():
                bodies[name] = merge(ondemand.get("common") or {}, place or {})
        return bodies
    return {}


def policy_from_config(config: Mapping[str, Any] | None) -> ContainerPolicy:
    c = config or {}
    return ContainerPolicy(capabilities=tuple(c.get("capabilities", ())), public_ports=tuple(c.get("publicPorts", ())),
                           writable_root=bool(c.get("writableRoot", False)), untrusted=bool(c.get("untrusted", False)),
                           max_gpus=int(c.get("maxGpus", 8)), sudo=bool(c.get("sudo", False)))


def validator(rule_id: str) -> Callable[[Any, Callable[[str, str | None], None]], None]:
    """A CrossGuard resource validator for one rule: args is pulumi_policy's ResourceValidationArgs (resource_type,
    props, urn, name, and the policy's `--policy-pack-config` through its get_config(); it has no `config`
    attribute)."""

    def validate(args: Any, report_violation: Callable[[str, str | None], None]) -> None:
        if args.resource_type != CONTAINER:
            return
        policy = policy_from_config(args.get_config())
        component = host_component(args.urn, args.name)
        if component == types.INGRESS_PROXY:
            # A url port is public when the ingress is (as `sandstack check` counts it); the sandbox publishes
            # nothing, so the ingress's own routes say which of its ports are served.
            for upstream, ports in sorted(served_url_ports(args.props).items()):
                found = url_port_violation(ports, policy)
                if found and found[0] == rule_id:
                    report_violation(f"Container '{upstream}' {found[2]}. {found[3]}", None)
            return
        if component == types.RUNTIME_SERVICE:
            # Exempt itself (it needs the Docker socket), but what it creates on demand is a sandbox like the warm
            # ones, and its recipe is in its configuration: judged place by place, as `sandstack check` judges it.
            for place, body in sorted(ondemand_bodies(args.props).items()):
                for rule, _, message, fix in container_violations(facts_of_body(body), policy):
                    if rule == rule_id:
                        report_violation(f"Container '{place}' (created on demand by the runtime, from its recipe) "
                                         f"{message}. {fix or RULES[rule].remediation}", None)
            return
        if component is not None:
            return
        for rule, _, message, fix in container_violations(facts_of_inputs(args.props), policy):
            if rule == rule_id:
                report_violation(f"Container '{args.name}' {message}. {fix or RULES[rule].remediation}", None)

    validate.__name__ = f"validate_{rule_id.replace('-', '_').lower()}"
    return validate
