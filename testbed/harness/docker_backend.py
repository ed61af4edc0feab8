"""The Docker backend: the harness's stand-in for the pulumi-docker provider plugin.

Creates, updates, deletes and reads the objects of the mapped resource types on the LOCAL daemon
with the Docker SDK for Python, returning the computed outputs the real provider would. Every object
it creates carries the session labels (LABEL_SESSION/LABEL_PID/LABEL_URN) so a teardown by label
removes everything even after a failed test (see teardown.py).
"""

from __future__ import annotations

import os
import secrets
import threading

import docker
import pulumi

from testbed.harness import container_ops, other_ops
from testbed.provider.schema import Ctx, ResourceMapping
from testbed.provider.tables import MAPPINGS, PROVIDER_LOCAL_FIELDS
from testbed.provider.mocks import HarnessError, Registration, UnsupportedResourceError

LABEL_SESSION = "sandstack.harness.session"
LABEL_PID = "sandstack.harness.pid"
LABEL_URN = "sandstack.harness.urn"
DEFAULT_SOCKET = "/var/run/docker.sock"


class DockerBackend:
    """Applies registrations to the daemon at `base_url` (default: DOCKER_HOST or the local socket)."""

    kind = "engine"

    def __init__(self, session_id: str, base_url: str | None = None, timeout: int = 300):
        self.session_id = session_id
        self.base_url = base_url or os.environ.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"
        if not self.base_url.startswith("unix://"):
            raise HarnessError(f"the engine harness only drives a local daemon over its unix socket, not {self.base_url!r}")
        self.socket = os.path.realpath(self.base_url[len("unix://"):])
        self.timeout = timeout
        self._local = threading.local()
        self._lock = threading.Lock()
        self.providers: dict[str, dict] = {}   # provider reference "urn::id" -> its inputs
        self.api_version = self.api.api_version
        self.mappings = MAPPINGS
        self.extra_types: dict = {}

    @property
    def api(self) -> docker.APIClient:
        """One low-level client per thread (Pulumi calls new_resource from several threads at once)."""
        client = getattr(self._local, "api", None)
        if client is None:
            client = self._local.api = docker.APIClient(base_url=self.base_url, version="auto", timeout=self.timeout)
        return client

    def labels(self, urn: str) -> dict[str, str]:
        return {LABEL_SESSION: self.session_id, LABEL_PID: str(os.getpid()), LABEL_URN: urn}

    # --- providers ---------------------------------------------------------------------------------
    def register_provider(self, reg: Registration) -> tuple[str, dict]:
        ident = f"provider-{abs(hash(reg.urn)) % 10**12}"
        with self._lock:
            self.providers[f"{reg.urn}::{ident}"] = dict(reg.inputs)
        return ident, dict(reg.inputs)

    def provider_host(self, urn: str, provider_ref: str) -> str:
        """The daemon a resource targets; refuses anything but this machine's daemon."""
        if not provider_ref:  # default provider: docker:host config, else DOCKER_HOST, else the local socket
            host = pulumi.runtime.get_config("docker:host") or os.environ.get("DOCKER_HOST") or ""
            inputs = {"host": host}
        else:
            with self._lock:
                inputs = self.providers.get(provider_ref)
            if inputs is None:
                raise HarnessError(f"{urn}: unknown provider reference {provider_ref!r}")
            host = inputs.get("host") or ""
        extra = sorted(set(inputs) - PROVIDER_LOCAL_FIELDS)
        if host and not (host.startswith("unix://") and os.path.realpath(host[7:]) == self.socket):
            raise UnsupportedResourceError(
                f"{urn}: its provider {provider_ref or '(default)'} targets host {host!r}; the engine harness only "
                f"applies resources to this machine's daemon (unix://{self.socket})")
        if extra:
            raise UnsupportedResourceError(f"{urn}: provider {provider_ref} sets {extra}, which the engine harness "
                                           f"does not map (only 'host' pointing at the local socket)")
        return host or f"unix://{self.socket}"

    # --- resources ---------------------------------------------------------------------------------
    def autoname(self, reg: Registration, mapping: ResourceMapping, generation: int) -> str | None:
        """Pulumi autoname: `<logical name>-<7 random hex>`, new for every replacement."""
        if not mapping.autoname or reg.inputs.get("name"):
            return None
        return f"{reg.name}-{secrets.token_hex(4)[:7]}"

    def ctx(self, mapping: ResourceMapping, urn: str, inputs: dict, autoname: str | None) -> Ctx:
        return Ctx(mapping.token, urn, inputs, self.api_version, autoname)

    def create(self, reg: Registration, mapping: ResourceMapping, autoname: str | None) -> tuple[str, dict]:
        if reg.unknown_fields:
            raise HarnessError(f"{reg.urn}: inputs {reg.unknown_fields} are unknown; the engine harness applies "
                               f"real runs only (preview=False)")
        api, plan, labels = self.api, reg.plan, self.labels(reg.urn)
        if mapping.title == "Container":
            cid = container_ops.create(api, plan, labels, reg.urn)
            logs = container_ops.attach_and_collect(api, cid, plan)
            return cid, container_ops.read(api, cid, reg.inputs, plan, logs)
        if mapping.title == "Network":
            nid = other_ops.create_network(api, plan, labels)
            return nid, other_ops.read_network(api, nid, reg.inputs)
        if mapping.title == "Volume":
            name = other_ops.create_volume(api, plan, labels)
            return name, other_ops.read_volume(api, name, reg.inputs)
        if mapping.title == "RegistryImage":
            # Pushing needs a registry, and none exists here: the dry backend models the push's change semantics.
            raise HarnessError(f"{reg.urn}: RegistryImage pushes {plan.name!r} to a registry; this machine has none, "
                               "so the engine harness cannot apply it (the dry backend models it)")
        if plan.build is not None:
            other_ops.build_image(api, plan, labels, reg.urn)
        else:
            other_ops.ensure_image(api, plan.name, reg.urn)
        return other_ops.read_image(api, plan.name, reg.inputs)

    def update(self, reg: Registration, mapping: ResourceMapping, entry, changed: set[str],
               start_again: bool) -> dict:
        if mapping.title == "Container":
            container_ops.update(self.api, entry.id, reg.plan, changed, start_again)
            return container_ops.read(self.api, entry.id, reg.inputs, reg.plan, entry.outputs.get("containerLogs"))
        return {**entry.outputs, **reg.inputs}  # only STATE_ONLY fields can change in place here

    def delete(self, entry) -> str:
        mapping = MAPPINGS[entry.typ]
        plan, _ = mapping.translate(self.ctx(mapping, entry.urn, entry.inputs, entry.outputs.get("name")))
        if mapping.title == "Container":
            return container_ops.delete(self.api, entry.id, plan)
        if mapping.title == "Network":
            return other_ops.delete_network(self.api, entry.id)
        if mapping.title == "Volume":
            return other_ops.delete_volume(self.api, entry.id)
        return other_ops.delete_image(self.api, plan.name, entry.outputs.get("imageId", ""), plan,
                                      (LABEL_SESSION, self.session_id), entry.urn)

    # --- invokes -----------------------------------------------------------------------------------
    def invoke(self, token: str, args: dict, provider: str) -> dict:
        self.provider_host(f"invoke {token}", provider)
        if token == "docker:index/getNetwork:getNetwork":
            try:
                info = self.api.inspect_network(args["name"])
            except docker.errors.NotFound:
                raise HarnessError(f"invoke {token}: no network named {args.get('name')!r}") from None
            return {"id": info["Id"], **{k: v for k, v in other_ops.read_network(self.api, info["Id"], {}).items()
                                         if k in ("name", "driver", "internal", "options", "scope", "ipamConfigs")}}
        if token == "docker:index/getRemoteImage:getRemoteImage":
            other_ops.ensure_image(self.api, args["name"], f"invoke {token}")
            _, outputs = other_ops.read_image(self.api, args["name"], {})
            return {"id": outputs["imageId"], "name": args["name"], "repoDigest": outputs["repoDigest"]}
        raise UnsupportedResourceError(
            f"invoke {token} is not mapped by the engine harness (mapped: getNetwork, getRemoteImage; "
            f"registry invokes cannot work here: there is no registry)")
