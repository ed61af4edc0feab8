"""The whole spec of one Pulumi stack: one YAML file in `stacks/`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import StringConstraints

from sandstack.spec.access import AS_FIELDS, AS_RESOLVED, NEVER, capacity, loosens
from sandstack.spec.changes import PROVIDER, RUNTIME_HOST, URL_PORTS, URL_PORTS_AND_RUNTIME, Effect
from sandstack.spec.models.base import Name, StrictModel, field
from sandstack.spec.models.hosts import Host
from sandstack.spec.models.limits import SIZE_PIDS, Limits, SizeClass
from sandstack.spec.models.policy import Policy
from sandstack.spec.models.templates import TEMPLATE_SWITCH, Template, TemplateDefaults
from sandstack.spec.roles import HOST_ROLES


# A pool added to a host or taken off it: on that host its network, the guard's rules and limits, the gateway, the
# logging resolver, the ingress's sites and the runtime's configuration; nothing on the hosts it keeps.
PLACEMENT = Effect(sandboxes="scale", host=frozenset(name for name, role in HOST_ROLES.items() if role.per_pool),
                   scope="placement", label_text="placement")
# A pool's places on a host changed in number (`max`, `max_hibernated`): the guard holds each place's limits, the
# runtime their recipe, the ingress a site per place where it serves url ports.
PLACES = Effect(sandboxes="none", host=frozenset({"guard", "runtime"}), when=(
    (URL_PORTS, Effect(sandboxes="none", host=frozenset({"guard", "runtime", "ingress"}))),))


class Pool(StrictModel):
    """A warm pool: `replicas` running sandboxes of one template on each of its hosts."""

    template: Name = field(
        description="Name of a template in `templates`. A change moves the pool to that template's snapshot image, "
                    "network policy, secrets and data, and renews the host objects that hold what the two templates "
                    "set differently (its network, the guard's rules and limits, the gateway, the logging resolver, "
                    "the ingress's sites, the runtime's configuration).",
        change=TEMPLATE_SWITCH,
        access=AS_RESOLVED,
    )
    hosts: list[Name] = field(
        description="Names of hosts in `hosts`; the pool runs `replicas` sandboxes on each. A host added gets "
                    "the pool's objects (and its own, if new); a host removed loses them; the others keep theirs.",
        change=PLACEMENT,
        access=NEVER, min_length=1, max_length=64,
    )
    replicas: int = field(
        1, description="Sandboxes per host. Default 1; 0 keeps the pool declared but empty. The guard holds each "
                    "sandbox's pids limit, so it is renewed; so are the ingress (url ports: a site per sandbox) and "
                    "the runtime service (its configuration lists each pool's sandboxes).",
        change=Effect(sandboxes="scale", host=frozenset({"guard"}), when=(
            (URL_PORTS_AND_RUNTIME, Effect(sandboxes="scale", host=frozenset({"guard", "ingress", "runtime"}))),
            (URL_PORTS, Effect(sandboxes="scale", host=frozenset({"guard", "ingress"}))),
            (RUNTIME_HOST, Effect(sandboxes="scale", host=frozenset({"guard", "runtime"}))))),
        access=capacity("raised: more sandboxes of the same template"),
        ge=0, le=250,
    )
    max: int | None = field(
        None, description="The ceiling per host: sandboxes the runtime may add on demand at claim time, warm ones "
                          "included, from the same template and settings (docs/design/ondemand.md). Unset: "
                          "`replicas` (no on demand). At least `replicas`; above it the host needs a runtime. "
                          "Capacity rules count the ceiling. The guard holds each place's limits and the runtime "
                          "its recipe, so both are renewed; so is the ingress (a site per place) where it serves "
                          "url ports.",
        change=PLACES,
        access=NEVER,
        ge=0, le=250,
    )
    max_hibernated: int | None = field(
        None, description="The ceiling per host of sessions hibernated in places made on demand, counted apart from "
                          "`max`, which then bounds only the sandboxes running (or being made): the pool gets this "
                          "many more on-demand places, a claim, branch or resume is refused only when `max` "
                          "sandboxes run, and a hibernation past this ceiling is refused "
                          "(docs/design/ondemand.md). Unset: a hibernated session holds its place under `max`. "
                          "Needs `max` above `replicas`. Capacity rules count memory and CPUs at `max`, disk and "
                          "GPUs at every place. The guard holds each place and the runtime its recipe, so both are "
                          "renewed; so is the ingress (a site per place) where it serves url ports.",
        change=PLACES,
        access=capacity("raised: more sessions may be kept hibernated, each holding its disk"),
        ge=0, le=250,
    )
    description: Annotated[str, StringConstraints(max_length=500)] = field("", description="What it is for.",
                                                                          change="none",
                                                                          access=NEVER)

    sizes: dict[Name, SizeClass] | None = field(
        None, description="Size classes a claim may name (`size`), each a set of limits: CPUs, memory, disk, pids. "
                          "A claim naming none gets the template's limits; one naming a class the pool does not "
                          "declare is refused, naming the classes. Capacity rules and the review count the largest "
                          "class at the ceiling. The runtime applies a class at claim (it needs a runtime on every "
                          "host of the pool, rule size-runtime), so a change reloads its configuration; the guard "
                          "holds the largest pids (docs/design/sizes.md).",
        change=SIZE_PIDS, access=AS_FIELDS, max_length=16,
    )

    @property
    def ceiling(self) -> int:
        """Sandboxes per host at most: the warm ones and those created on demand."""
        return self.replicas if self.max is None else max(self.max, self.replicas)

    @property
    def places(self) -> int:
        """Sandbox names per host: the ceiling's, and one more per hibernated session `max_hibernated` allows."""
        return self.ceiling + (self.max_hibernated or 0)


class Stack(StrictModel):
    """A sandstack spec: the hosts, templates and pools of one Pulumi stack."""

    version: Literal[1] = field(description="Spec format version; always 1 for now.", change="none",
                                access=NEVER)
    description: Annotated[str, StringConstraints(max_length=500)] = field("", description="What the stack is for.",
                                                                          change="none",
                                                                          access=NEVER)
    # A host added or removed: all its objects are created or deleted with its provider.
    hosts: dict[Name, Host] = field(
        description="Docker hosts by name. At least one.", change=PROVIDER,
        access=NEVER, min_length=1, max_length=64
    )
    profiles: dict[Name, Limits] = field(
        {}, description="Named limit sets that templates refer to, e.g. `small`, `large`.", change="replace",
        access=AS_RESOLVED,
        max_length=64,
    )
    defaults: TemplateDefaults = field(
        TemplateDefaults(), description="Settings every template gets unless it sets its own.", change="replace",
        access=AS_FIELDS
    )
    templates: dict[Name, Template] = field(
        description="Sandbox templates by name. At least one.", change="rebuild",
        access=AS_RESOLVED, min_length=1, max_length=128
    )
    pools: dict[Name, Pool] = field(
        {}, description="Warm pools: templates placed on hosts with a replica count.", change="replace",
        access=loosens("pool", "a pool added", None, {"template": "agent", "hosts": ["local"]}),
        max_length=256,
    )
    policy: Policy = field(
        Policy(), description="What `sandstack check` holds this stack to, and its reasoned exceptions.",
        change="none",
        access=NEVER,
    )
