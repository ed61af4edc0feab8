"""The Pulumi type tokens of sandstack's components, defined once: the components register under them, and the
CrossGuard pack tells sandstack's own host containers from a program's by them (a URN carries its parents' type
chain, which a label on a container cannot change). One component per file in `components/`, token
`sandstack:index:<Component>`."""

from __future__ import annotations

PACKAGE = "sandstack:index:"
SANDBOX_STACK = f"{PACKAGE}SandboxStack"
SANDBOX_HOST = f"{PACKAGE}SandboxHost"
SANDBOX_TEMPLATE = f"{PACKAGE}SandboxTemplate"
SANDBOX_POOL = f"{PACKAGE}SandboxPool"
HOST_GUARD = f"{PACKAGE}HostGuard"
EGRESS_GATEWAY = f"{PACKAGE}EgressGateway"
CONNECTION_LOGGER = f"{PACKAGE}ConnectionLogger"
INGRESS_PROXY = f"{PACKAGE}IngressProxy"
RUNTIME_SERVICE = f"{PACKAGE}RuntimeService"
# The run-once seeders a SandboxPool makes beside its sandboxes: their logical names end in these (`<pool>-…`); a
# sandbox's ends in its replica number.
SECRETS_SEEDER = "secrets-seeder"
DATA_SEEDER = "data-seeder"
# pulumi-docker's container, the only resource type the container-level rules read.
CONTAINER = "docker:index/container:Container"
