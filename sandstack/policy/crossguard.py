"""The CrossGuard side of the container-level rules (policies/crossguard/): validators over the inputs of every
`docker:index/container:Container` that `pulumi preview --policy-pack` sees, including containers a program
makes outside sandstack's components. The rules are `sandstack.policy.containers`', shared with `sandstack
check`; this module imports no pulumi_policy, so it is tested without the pack's blocking entry point.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from sandstack.policy.builtin import RULES
from sandstack.policy.containers import ContainerPolicy, container_violations, facts_of_inputs
from sandstack.spec.contract import LABEL_ROLE

CONTAINER = "docker:index/container:Container"
# sandstack's own host containers, which the sandbox rules do not fit: the guard needs root and host namespaces
# by design (docs/design), the connection logger NET_ADMIN in the host's network namespace
# (docs/design/egress-log.md), the runtime service the Docker socket (docs/design/runtime.md), the ingress proxy
# its public port (docs/design/ingress.md); these, the gateway and the seeders are checked by their own tests.
# Every other container is checked.
INFRA_ROLES = ("guard", "gateway", "secrets-seeder", "data-seeder", "logger", "runtime", "ingress")
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


def _role(props: Mapping[str, Any]) -> str | None:
    for item in props.get("labels") or []:
        if item.get("label") == LABEL_ROLE:
            return item.get("value")
    return None


def policy_from_config(config: Mapping[str, Any] | None) -> ContainerPolicy:
    c = config or {}
    return ContainerPolicy(capabilities=tuple(c.get("capabilities", ())), public_ports=tuple(c.get("publicPorts", ())),
                           writable_root=bool(c.get("writableRoot", False)), untrusted=bool(c.get("untrusted", False)),
                           max_gpus=int(c.get("maxGpus", 8)), sudo=bool(c.get("sudo", False)))


def validator(rule_id: str) -> Callable[[Any, Callable[[str, str | None], None]], None]:
    """A CrossGuard resource validator for one rule: args is pulumi_policy's ResourceValidationArgs (resource_type,
    props, name, and the policy's `--policy-pack-config` through its get_config(); it has no `config` attribute)."""

    def validate(args: Any, report_violation: Callable[[str, str | None], None]) -> None:
        if args.resource_type != CONTAINER or _role(args.props) in INFRA_ROLES:
            return
        facts = facts_of_inputs(args.props)
        for rule, _, message in container_violations(facts, policy_from_config(args.get_config())):
            if rule == rule_id:
                report_violation(f"Container '{args.name}' {message}. {RULES[rule].remediation}", None)

    validate.__name__ = f"validate_{rule_id.replace('-', '_').lower()}"
    return validate
