"""The plan as one tree of plain values: every resource `pulumi up` registers for a spec, computed once.

A `Node` is one registration: its logical name, type token, parent, provider, the exact inputs the component
passes (Python keyword arguments of the pulumi-docker resource; nested argument types as plain dicts, which the
SDK accepts) and its resource options. An input that is another resource's output is a `Ref` to that node; a
secret is a `Secret` naming its config key. The components (components/register.py) register exactly these
nodes and compute nothing else; review and policy read the same nodes. No Pulumi here.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from sandstack.plan.container import Healthcheck, RunSettings

CONTAINER = "docker:index/container:Container"
NETWORK = "docker:index/network:Network"
VOLUME = "docker:index/volume:Volume"
REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"
REGISTRY_IMAGE = "docker:index/registryImage:RegistryImage"
PROVIDER = "pulumi:providers:docker"


@dataclass(frozen=True)
class Ref:
    """An output of another node (`name` of a volume, `image_id` of an image): known only once it exists."""

    node: str  # the node's key
    attr: str


@dataclass(frozen=True)
class Secret:
    """A Pulumi secret config value, by key; `text` places it in a string (`KEY={}`). With `derive`, not the value
    but its HMAC-SHA256 under that label (hex): a second secret known only where the first one is (the ingress's
    wake token, from the host's runtime token), with no state to keep and nothing of the first one in it."""

    key: str
    text: str = "{}"
    derive: str = ""

    def render(self, value: str) -> str:
        """What the resource receives, given the config value (only ever inside Pulumi's secret output)."""
        if self.derive:
            value = hmac.new(value.encode(), self.derive.encode(), hashlib.sha256).hexdigest()
        return self.text.replace("{}", value, 1)


@dataclass(frozen=True)
class After:
    """A value known now that depends on other nodes all the same (Pulumi records the dependency): adding or removing
    one of them changes no value, but one of them replaced delete-before-replace renews the node holding it, where the
    input forces a new resource (Pulumi's dependent rule). A reload container names its service so, and the gateway
    and the ingress the pool networks their reload container joins them to (sandstack.plan.reload)."""

    text: str
    nodes: tuple[str, ...]  # node keys


@dataclass(frozen=True)
class Options:
    delete_before_replace: bool = False
    replace_on_changes: tuple[str, ...] = ()
    depends_on: tuple[str, ...] = ()  # node keys
    aliases: tuple[str, ...] = ()  # old URNs of this resource, so a move never replaces it


@dataclass(frozen=True)
class Node:
    name: str  # Pulumi's logical name
    type: str  # the resource type token
    parent: str | None  # the parent node's key
    provider: str | None = None  # the provider node's key (custom resources of a host)
    inputs: Mapping[str, Any] = field(default_factory=dict)
    options: Options = Options()

    @property
    def key(self) -> str:
        return node_key(self.type, self.name)

    @property
    def custom(self) -> bool:
        return not self.type.startswith("sandstack:")


def node_key(typ: str, name: str) -> str:
    return f"{typ}::{name}"


@dataclass(frozen=True)
class About:
    """What a reviewer calls a node (host, guard, network, sandbox, ...) and where it belongs."""

    kind: str
    host: str | None = None
    pool: str | None = None
    template: str | None = None


@dataclass
class Tree:
    """Every node of a stack in registration order (a parent before its children), by key."""

    nodes: dict[str, Node] = field(default_factory=dict)
    about: dict[str, About] = field(default_factory=dict)
    # Each node's children's keys, in order: looking them up by scanning every node cost O(n) per component.
    kids: dict[str, list[str]] = field(default_factory=dict, repr=False, compare=False)

    def add(self, node: Node, about: About | None = None) -> Node:
        if node.key in self.nodes:
            raise ValueError(f"two resources {node.key}: Pulumi refuses the second")
        if node.parent is not None and node.parent not in self.nodes:
            raise ValueError(f"{node.key}: its parent {node.parent} is not planned before it")
        self.nodes[node.key] = node
        self.kids.setdefault(node.parent, []).append(node.key)  # type: ignore[arg-type]
        if about is not None:
            self.about[node.key] = about
        return node

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes.values())

    def __len__(self) -> int:
        return len(self.nodes)

    def children(self, key: str) -> list[Node]:
        return [self.nodes[k] for k in self.kids.get(key, ())]


def inputs(**values: Any) -> dict[str, Any]:
    """Keyword inputs without the unset ones (None), as the SDK leaves them out of the registration."""
    return {k: v for k, v in values.items() if v is not None}


def label_list(values: Mapping[str, str]) -> list[dict[str, str]]:
    """pulumi-docker's labels: a list of {label, value} (containers, networks and volumes alike)."""
    return [{"label": k, "value": v} for k, v in values.items()]


def bridge_options(bridge: str, *, icc: bool = False) -> dict[str, str]:
    # Without icc, containers on one bridge cannot talk to each other; the guard opens only the gateway's port and
    # the ingress's way to url ports.
    return {"com.docker.network.bridge.name": bridge, "com.docker.network.bridge.enable_icc": str(icc).lower()}


def healthcheck_inputs(check: Healthcheck | None) -> dict[str, Any] | None:
    if check is None:
        return None
    return {"tests": list(check.tests), "interval": check.interval, "timeout": check.timeout,
            "retries": check.retries, "start_period": check.start_period}


def run_inputs(run: RunSettings) -> dict[str, Any]:
    """A container's run settings as inputs: restart, health check, wait, grace, log rotation."""
    return {"restart": run.restart, "max_retry_count": run.max_retry_count,
            "destroy_grace_seconds": run.destroy_grace_seconds, "healthcheck": healthcheck_inputs(run.healthcheck),
            "wait": run.wait, "wait_timeout": run.wait_timeout, "log_driver": run.logs.driver,
            "log_opts": run.logs.opts}
