"""The Pulumi type tokens of sandstack's components, defined once: the components register under them, and the
CrossGuard pack tells sandstack's own host containers from a program's by them (a URN carries its parents' type
chain, which a label on a container cannot change). One component per file in `components/`, token
`sandstack:index:<Component>`. A host role's token is its descriptor's (sandstack.spec.roles)."""

from __future__ import annotations

from sandstack.spec.roles import HOST_ROLES, PACKAGE

SANDBOX_STACK = f"{PACKAGE}SandboxStack"
SANDBOX_HOST = f"{PACKAGE}SandboxHost"
SANDBOX_TEMPLATE = f"{PACKAGE}SandboxTemplate"
SANDBOX_POOL = f"{PACKAGE}SandboxPool"


def _token(role: str) -> str:
    component = HOST_ROLES[role].component
    if component is None:
        raise ValueError(f"host role {role!r} has no component")
    return component


HOST_GUARD = _token("guard")
EGRESS_GATEWAY = _token("gateway")
CONNECTION_LOGGER = _token("logger")
INGRESS_PROXY = _token("ingress")
RUNTIME_SERVICE = _token("runtime")
# The run-once seeders a SandboxPool makes beside its sandboxes: their logical names end in these (`<pool>-…`); a
# sandbox's ends in its replica number.
SECRETS_SEEDER = "secrets-seeder"
DATA_SEEDER = "data-seeder"
# pulumi-docker's container, the only resource type the container-level rules read.
CONTAINER = "docker:index/container:Container"
