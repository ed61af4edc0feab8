"""The change matrix: every spec field's declared change effect, proven on the dry harness (issue 8).

Each field of the spec models (walked recursively from `Stack`) has one case below: a value it changes
to in the rich fixture `BASE` (two pools on one local host: `agent`, an allow-list pool with its own
template that sets nearly every field, readiness, a port, secret env and a secret file, a snapshot with
setup and a file; `free`, an allow-all pool whose template inherits everything from `defaults` and the
`small` profile). The base is applied, then the changed spec, and what the second `pulumi up` did
(created/updated/replaced/deleted resources, by logical name) must be exactly what the field's
declared effect (`field(..., change=...)`, shown in the README reference) promises:

- none: nothing is created, updated, replaced or deleted.
- in-place: exactly the affected pools' sandbox containers are updated; nothing else changes.
- replace: exactly the affected pools' sandbox containers are replaced; the only other changes allowed
  are those pools' secrets objects (volume, seeder), and only where the case concerns secrets.
  Nothing on the host (guard, gateway, networks, infra image) and no snapshot image changes.
- rebuild: exactly the changed template's snapshot image is replaced (create-before-delete: its old
  image is deleted at the end of the run) and its pools' sandboxes are replaced onto it; nothing else.
- host: at least one host-level object (the provider's inputs, infra image, guard volume/container,
  gateway volume/container, egress network, the pools' networks) changes, and every other change is a
  consequence of a host object: a sandbox, secrets object or snapshot image changes only when its provider
  was replaced (`<provider>`); a sandbox also when its pool's network was replaced; the secrets seeder (a
  run-once container on the infra image) also when the infra image was replaced, with only its `image`.
  The dry harness gives providers no diff, so a change of the provider's inputs is counted as its update.

The "affected pools" of a case are `agent` for `templates.*` and `pools.*` fields, `free` for `defaults.*`
and `profiles.*` fields (the `agent` template sets those itself), unless the case says otherwise.

`test_every_model_field_has_a_case` fails when a model field has neither a case nor an entry in
`EXEMPT` (a short list, each with its reason): a new field must come with its matrix case.
A case whose effect differs from the declaration and cannot be fixed by a better declaration (the effect
needs a category the reference lacks, or the components would have to change) is a strict xfail naming
the finding.
"""

from __future__ import annotations

import copy
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest
from pydantic import BaseModel

from sandstack.spec.models import Stack
from tests.components.helpers import stack_program, write_spec
from tests.support.recording_mocks import UnsupportedResourceError

HOST = "local"
SECRETS = {"apiToken": "tok", "apiToken2": "tok2", "githubToken": "gh", "githubToken2": "gh2",
           "sharedToken": "shared", "sharedToken2": "shared2", "caPem": "CA", "caPem2": "CA2",
           "certPem": "CERT", "certPem2": "CERT2", "keyPem": "KEY", "keyPem2": "KEY2"}
FILES = {"files/tool.sh": "echo tool\n", "files/other.sh": "echo other\n"}

BASE: dict = {
    "version": 1,
    "description": "change matrix",
    "hosts": {HOST: {
        "endpoint": "unix:///var/run/docker.sock",
        "capacity": {"cpus": 64, "memory": "256GiB", "disk": "1TiB", "gpus": [{"type": "nvidia-l4", "count": 8}]},
        "overcommit": {"cpus": 2, "memory": 1, "disk": 1},
        "labels": {"team": "sandbox"},
    }},
    "profiles": {
        "small": {"cpus": 1, "memory": "512MiB", "disk": "512MiB", "pids": 128, "open_files": 1024,
                  "gpus": {"count": 1, "type": "nvidia-l4"}},
        "big": {"cpus": 4, "memory": "2GiB", "disk": "1GiB", "pids": 512, "open_files": 4096},
    },
    "defaults": {
        "limits": {"profile": "small"},
        "network": {"egress": "allow-all", "deny": ["blocked.example.com"]},
        "runtime": "runc",
        "lifecycle": {"max_lifetime": "24h", "idle_timeout": "30m", "on_expiry": "stop"},
        "filesystem": {"read_only_root": True, "writable": [{"path": "/tmp", "size": "64MiB"}], "shm_size": "16MiB"},
        "security": {"capabilities": [], "privileged": False, "no_new_privileges": True},
        "env": {"LANG": "C.UTF-8", "SHARED": {"secret": "sharedToken"}},
        "user": "10001:10001",
        "workdir": "/workspace",
    },
    "templates": {
        "agent": {
            "description": "an agent",
            "base_image": "busybox:1.36",
            "snapshot": {"version": "1", "setup": ["true"],
                         "files": [{"source": "files/tool.sh", "path": "/usr/local/bin/tool", "mode": "0755"}]},
            "limits": {"profile": "big", "cpus": 2, "memory": "1GiB", "disk": "512MiB", "pids": 64,
                       "open_files": 2048, "gpus": {"count": 1, "type": "nvidia-l4"}},
            "network": {"egress": "allow-list", "allow": ["example.com"], "deny": ["bad.example.com"]},
            "runtime": "runc",
            "lifecycle": {"max_lifetime": "12h", "idle_timeout": "20m", "on_expiry": "stop"},
            "filesystem": {"read_only_root": True, "writable": [{"path": "/tmp", "size": "64MiB"}],
                           "shm_size": "16MiB"},
            "security": {"capabilities": [], "privileged": False, "no_new_privileges": True},
            "env": {"MODE": "x", "TOKEN": {"secret": "apiToken"}},
            "user": "10001:10001",
            "workdir": "/work",
            "secrets": [{"secret": "githubToken", "path": "/run/secrets/github-token"}],
            "entrypoint": ["/bin/sh", "-c"],
            "command": ["sleep infinity"],
            "readiness": {"command": ["true"], "interval": "5s", "timeout": "2s", "retries": 3, "start_period": "1s"},
            "ports": [{"port": 8080, "protocol": "tcp", "exposure": "host", "host_port": 18080, "name": "http"}],
        },
        "free": {"base_image": "busybox:1.36"},
    },
    "pools": {
        "agent": {"template": "agent", "hosts": [HOST], "replicas": 1, "description": "agents"},
        "free": {"template": "free", "hosts": [HOST], "replicas": 1},
    },
}

# --- model walk ----------------------------------------------------------------------------------------


def _models_in(annotation: Any, suffix: str = "") -> list[tuple[str, type[BaseModel]]]:
    """(path suffix, model) of each model inside a type: a map's values add '.*', a list's items '[]'."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(suffix, annotation)]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _models_in(args[0], suffix)
    if origin is dict:
        return _models_in(args[1], suffix + ".*")
    if origin is list:
        return _models_in(args[0], suffix + "[]")
    return [found for arg in args for found in _models_in(arg, suffix)]


def model_fields(model: type[BaseModel] = Stack, prefix: str = "") -> dict[str, str]:
    """Every field path ('templates.*.ports[].port') → its declared change effect."""
    out: dict[str, str] = {}
    for name, info in model.model_fields.items():
        path = prefix + name
        out[path] = info.json_schema_extra["x-change"]  # type: ignore[index]
        for suffix, sub in _models_in(info.annotation):
            out.update(model_fields(sub, f"{path}{suffix}."))
    return out


DECLARED = model_fields()

# Fields with no case, each with why: maps whose entries are the unit of change (each entry's fields have
# their own cases), and the top-level blocks that only group fields.
EXEMPT = {
    "hosts": "map of hosts: adding one creates that host's objects, removing one deletes them; each host field "
             "has its own case",
    "profiles": "map of profiles: a profile changes nothing until referred to; its fields have their own cases",
    "templates": "map of templates: a template is built only when a pool places it; its fields have their own cases",
    "pools": "map of pools: adding one creates its objects; its fields have their own cases",
    "defaults": "a block grouping fields, each with its own case",
}

# --- cases ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    path: str  # the model path, as in DECLARED
    value: Any  # the new value
    at: str | None = None  # the concrete spec path (default: '*' → the default key, '[]' → item 0)
    prepare: Callable[[dict], None] | None = None  # adjusts the base for this case (applied to both runs)
    pools: tuple[str, ...] | None = None  # the affected pools (default: by prefix, see the docstring)
    secrets: bool = False  # replace: the pool's secrets objects may change too
    xfail: str | None = None
    raises: type[BaseException] = AssertionError  # how an xfail case fails: the matrix's own assertion
    variant: str = ""  # a second case of one field (e.g. under a condition its description names)

    @property
    def id(self) -> str:
        return f"{self.path}#{self.variant}" if self.variant else self.path

    def spec_path(self) -> str:
        if self.at:
            return self.at
        keys = {"hosts": HOST, "profiles": "small", "templates": "agent", "pools": "agent"}
        parts = self.path.split(".")
        if parts[0] in keys and len(parts) > 1 and parts[1] == "*":
            parts[1] = keys[parts[0]]
        text = ".".join(parts)
        text = text.replace("env.*", "env.SHARED" if text.startswith("defaults") else "env.TOKEN")
        return text.replace("[]", ".0")

    def affected(self) -> tuple[str, ...]:
        if self.pools is not None:
            return self.pools
        return ("free",) if self.path.split(".")[0] in ("defaults", "profiles") else ("agent",)


def _set(data: dict, path: str, value: Any) -> None:
    node: Any = data
    *parents, last = path.split(".")
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def _delete(data: dict, path: str) -> None:
    node: Any = data
    *parents, last = path.split(".")
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    del node[last]


def setting(**paths: Any) -> Callable[[dict], None]:
    """A `prepare` that sets dotted paths ('__' in a keyword stands for '.'); None deletes the key."""
    def prepare(data: dict) -> None:
        for key, value in paths.items():
            path = key.replace("__", ".")
            if value is None:
                _delete(data, path)
            else:
                _set(data, path, value)
    return prepare


TCP_TLS = setting(hosts__local__endpoint="tcp://docker.example.com:2376", hosts__local__tls={
    "ca": {"secret": "caPem"}, "cert": {"secret": "certPem"}, "key": {"secret": "keyPem"}})
SSH = setting(hosts__local__endpoint="ssh://deploy@docker.example.com", hosts__local__ssh_opts=["-p", "22"])
FREE_ALLOW_LIST = setting(defaults__network={"egress": "allow-list", "allow": ["example.org"]})
AGENT_ALLOW_ALL = setting(templates__agent__network={"egress": "allow-all", "deny": ["203.0.113.7"]})
WRITABLE_ROOT = setting(hosts__local__storage_quota=True, templates__agent__filesystem={
    "read_only_root": False, "writable": [{"path": "/tmp", "size": "64MiB"}], "shm_size": "16MiB"})

MEMORY_BUILTIN_XFAIL = (
    "under 256MiB a template on the built-in /tmp or /dev/shm sizes gets new tmpfs sizes with its memory "
    "limit, which replaces its sandboxes: 'in-place' holds only above that (the description says so; a "
    "conditional effect has no category)"
)
PIDS_MIXED = (
    "mixes 'replace' and 'host': the new limits replace the sandboxes and the new pids limit renews the host "
    "guard (which holds every sandbox's pids.max); no category says both"
)
PROBE_MIXED = (
    "mixes 'replace' and 'host': with an `idle_timeout`, the readiness interval sets the CPU budget of the "
    "guard's idle check (its lifecycle line), so the guard is renewed along with the replaced sandboxes"
)
SECRETS_SEEDER = (
    "only the secrets seeder is replaced: the sandboxes keep running and read the re-seeded volume, so the "
    "'replace' declaration overstates it, and a changed or removed path leaves the old file in the volume "
    "(the seeder never empties it); fixing that is a component change"
)
TLS_SECRET = (
    "SecretRef.secret is declared once ('replace', right for `env`), but under `hosts.*.tls` its change "
    "renews the provider (a 'host' change); one declaration cannot say both without splitting the model"
)
LABELS_EVERYWHERE = (
    "host labels are on every object sandstack makes on the host: a change renews the host objects, rebuilds "
    "every snapshot image (build labels) and replaces every sandbox and secrets object, more than 'host' says"
)
DISK_READ_ONLY = (
    "with the read-only root (the default) `limits.disk` only bounds the writable paths' sizes at validation: "
    "a change applies to nothing, so 'replace' (true with a writable root) overstates it"
)
REPLICAS_MIXED = (
    "creates or deletes sandboxes (no replace) and renews the host guard (its pids list); no category says this"
)
POOL_TEMPLATE_MIXED = (
    "moving a pool to another template also renews its network, the guard and the gateway (the network policy "
    "changes) and deletes the old template's image and secrets objects; no category says this"
)
POOL_HOSTS_ADDED = (
    "placing a pool on one more host creates its network, snapshot image, secrets objects and sandboxes there "
    "(and that host's gateway and egress network), renews that host's guard and changes nothing on the other "
    "hosts: no sandbox is replaced, and no category says this"
)
PUSH_UNMAPPED = "the engine harness does not map docker:index/registryImage:RegistryImage, so `push_to` is unproven"
LIFECYCLE_XFAIL = (
    "mixes 'in-place' and 'host': `on_expiry` is in the host guard's lifecycle lines (the guard is renewed) and "
    "in the sandboxes' restart policy and retry count, which the provider updates in place; no sandbox is "
    "replaced, and no category says both"
)

CASES: list[Case] = [
    # --- stack
    Case("version", 1, prepare=None),
    Case("description", "another"),
    # --- hosts
    Case("hosts.*.endpoint", "ssh://deploy@docker.example.com"),
    Case("hosts.*.tls", {"ca": {"secret": "caPem2"}, "cert": {"secret": "certPem2"}, "key": {"secret": "keyPem2"}},
         prepare=TCP_TLS),
    Case("hosts.*.tls.ca", {"secret": "caPem2"}, prepare=TCP_TLS),
    Case("hosts.*.tls.ca.secret", "caPem2", prepare=TCP_TLS, xfail=TLS_SECRET),
    Case("hosts.*.tls.cert", {"secret": "certPem2"}, prepare=TCP_TLS),
    Case("hosts.*.tls.cert.secret", "certPem2", prepare=TCP_TLS, xfail=TLS_SECRET),
    Case("hosts.*.tls.key", {"secret": "keyPem2"}, prepare=TCP_TLS),
    Case("hosts.*.tls.key.secret", "keyPem2", prepare=TCP_TLS, xfail=TLS_SECRET),
    Case("hosts.*.ssh_opts", ["-p", "2222"], prepare=SSH),
    Case("hosts.*.capacity", {"cpus": 32, "memory": "128GiB", "disk": "512GiB",
                              "gpus": [{"type": "nvidia-l4", "count": 4}]}),
    Case("hosts.*.capacity.cpus", 32),
    Case("hosts.*.capacity.memory", "128GiB"),
    Case("hosts.*.capacity.disk", "512GiB"),
    Case("hosts.*.capacity.gpus", [{"type": "nvidia-l4", "count": 4}, {"type": "nvidia-a100", "count": 1}]),
    Case("hosts.*.capacity.gpus[].type", "nvidia-l4x", prepare=setting(
        templates__agent__limits__gpus={"count": 1}, profiles__small__gpus={"count": 1})),
    Case("hosts.*.capacity.gpus[].count", 4),
    Case("hosts.*.overcommit", {"cpus": 4, "memory": 2, "disk": 2}),
    Case("hosts.*.overcommit.cpus", 4),
    Case("hosts.*.overcommit.memory", 2),
    Case("hosts.*.overcommit.disk", 2),
    Case("hosts.*.storage_quota", True),
    Case("hosts.*.subnet_pool", "10.99.0.0/16"),
    Case("hosts.*.infra_image", "registry.example.com/sandstack-infra:2",
         prepare=setting(hosts__local__infra_image="registry.example.com/sandstack-infra:1")),
    Case("hosts.*.labels", {"team": "agents"}, xfail=LABELS_EVERYWHERE),
    # --- profiles (the `free` pool's limits come from `small`)
    Case("profiles.*.cpus", 2),
    Case("profiles.*.memory", "768MiB"),
    Case("profiles.*.disk", "256MiB", prepare=setting(hosts__local__storage_quota=True, defaults__filesystem__read_only_root=False)),
    Case("profiles.*.disk", "256MiB", variant="read-only-root", xfail=DISK_READ_ONLY),
    Case("profiles.*.pids", 256),
    Case("profiles.*.open_files", 2048),
    Case("profiles.*.gpus", {"count": 2}),
    Case("profiles.*.gpus.count", 2),
    Case("profiles.*.gpus.type", "nvidia-a100",
         prepare=setting(hosts__local__capacity__gpus=[{"type": "nvidia-l4", "count": 8},
                                                       {"type": "nvidia-a100", "count": 8}])),
    # --- defaults (the `free` template inherits them all)
    Case("defaults.limits", {"profile": "small", "cpus": 3, "memory": "1GiB"}),
    Case("defaults.limits.cpus", 3),
    Case("defaults.limits.memory", "1GiB"),
    Case("defaults.limits.disk", "256MiB", prepare=setting(hosts__local__storage_quota=True, defaults__filesystem__read_only_root=False)),
    Case("defaults.limits.pids", 256),
    Case("defaults.limits.open_files", 2048),
    Case("defaults.limits.gpus", {"count": 2}),
    Case("defaults.limits.gpus.count", 2, prepare=setting(defaults__limits__gpus={"count": 1})),
    Case("defaults.limits.gpus.type", "nvidia-a100", prepare=setting(
        defaults__limits__gpus={"count": 1, "type": "nvidia-l4"},
        hosts__local__capacity__gpus=[{"type": "nvidia-l4", "count": 8}, {"type": "nvidia-a100", "count": 8}])),
    Case("defaults.limits.profile", "big", xfail=PIDS_MIXED),
    Case("defaults.network", {"egress": "allow-all", "log": False}),
    Case("defaults.network.egress", "deny-all", prepare=setting(defaults__network={"egress": "allow-all"})),
    Case("defaults.network.allow", ["example.org", "example.net"], prepare=FREE_ALLOW_LIST),
    Case("defaults.network.deny", ["blocked.example.com", "other.example.com"]),
    Case("defaults.network.log", False, prepare=setting(defaults__network={"egress": "allow-all"})),
    Case("defaults.network.allow_metadata", True),
    Case("defaults.runtime", "runsc"),
    Case("defaults.lifecycle", {"max_lifetime": "48h", "idle_timeout": "1h", "on_expiry": "restart"},
         xfail=LIFECYCLE_XFAIL),
    Case("defaults.lifecycle.max_lifetime", "48h"),
    Case("defaults.lifecycle.idle_timeout", "1h"),
    Case("defaults.lifecycle.on_expiry", "restart", xfail=LIFECYCLE_XFAIL),
    Case("defaults.filesystem", {"read_only_root": True, "writable": [{"path": "/scratch", "size": "32MiB"}]}),
    Case("defaults.filesystem.read_only_root", False, prepare=setting(hosts__local__storage_quota=True)),
    Case("defaults.filesystem.writable", [{"path": "/tmp", "size": "64MiB"}, {"path": "/scratch", "size": "32MiB"}]),
    Case("defaults.filesystem.writable[].path", "/scratch"),
    Case("defaults.filesystem.writable[].size", "128MiB"),
    Case("defaults.filesystem.writable[].exec", True),
    Case("defaults.filesystem.shm_size", "32MiB"),
    Case("defaults.security", {"capabilities": ["NET_BIND_SERVICE"], "privileged": False,
                               "no_new_privileges": True},
         prepare=setting(defaults__user="0:0", templates__agent__user="0:0")),
    Case("defaults.security.capabilities", ["NET_BIND_SERVICE"],
         prepare=setting(defaults__user="0:0", templates__agent__user="0:0")),
    Case("defaults.security.privileged", True),
    Case("defaults.security.no_new_privileges", False),
    Case("defaults.env", {"LANG": "C", "SHARED": {"secret": "sharedToken"}}, pools=("agent", "free")),
    Case("defaults.env.*.secret", "sharedToken2", pools=("agent", "free")),
    Case("defaults.user", "20001:20001"),
    Case("defaults.workdir", "/home"),
    # --- templates (the `agent` template sets each itself)
    Case("templates.*.limits", {"profile": "big"}, xfail=PIDS_MIXED),
    Case("templates.*.limits.cpus", 3),
    Case("templates.*.limits.memory", "2GiB"),
    Case("templates.*.limits.memory", "192MiB", variant="built-in-tmpfs", prepare=setting(
        templates__agent__filesystem=None, defaults__filesystem=None, templates__agent__limits__memory="128MiB"),
         xfail=MEMORY_BUILTIN_XFAIL),
    Case("templates.*.limits.disk", "256MiB", prepare=WRITABLE_ROOT),
    Case("templates.*.limits.pids", 128),
    Case("templates.*.limits.open_files", 4096),
    Case("templates.*.limits.gpus", {"count": 2}),
    Case("templates.*.limits.gpus.count", 2),
    Case("templates.*.limits.gpus.type", "nvidia-a100",
         prepare=setting(hosts__local__capacity__gpus=[{"type": "nvidia-l4", "count": 8},
                                                       {"type": "nvidia-a100", "count": 8}])),
    Case("templates.*.limits.profile", "small", prepare=setting(templates__agent__limits={"profile": "big"}),
         xfail=PIDS_MIXED),
    Case("templates.*.network", {"egress": "allow-list", "allow": ["example.org"]}),
    Case("templates.*.network.egress", "deny-all", prepare=setting(templates__agent__network={"egress": "allow-all"})),
    Case("templates.*.network.allow", ["example.com", "example.org"]),
    Case("templates.*.network.deny", ["bad.example.com", "worse.example.com"]),
    Case("templates.*.network.log", False, prepare=AGENT_ALLOW_ALL),
    Case("templates.*.network.allow_metadata", True),
    Case("templates.*.runtime", "runsc"),
    Case("templates.*.lifecycle", {"max_lifetime": "6h", "idle_timeout": "10m", "on_expiry": "restart"},
         xfail=LIFECYCLE_XFAIL),
    Case("templates.*.lifecycle.max_lifetime", "6h"),
    Case("templates.*.lifecycle.idle_timeout", "10m"),
    Case("templates.*.lifecycle.on_expiry", "restart", xfail=LIFECYCLE_XFAIL),
    Case("templates.*.filesystem", {"read_only_root": True, "writable": [{"path": "/scratch", "size": "32MiB"}]}),
    Case("templates.*.filesystem.read_only_root", False, prepare=setting(hosts__local__storage_quota=True)),
    Case("templates.*.filesystem.writable", [{"path": "/tmp", "size": "64MiB"}, {"path": "/scratch", "size": "8MiB"}]),
    Case("templates.*.filesystem.writable[].path", "/scratch"),
    Case("templates.*.filesystem.writable[].size", "128MiB"),
    Case("templates.*.filesystem.writable[].exec", True),
    Case("templates.*.filesystem.shm_size", "32MiB"),
    Case("templates.*.security", {"capabilities": ["NET_BIND_SERVICE"], "no_new_privileges": True},
         prepare=setting(templates__agent__user="0:0")),
    Case("templates.*.security.capabilities", ["NET_BIND_SERVICE"], prepare=setting(templates__agent__user="0:0")),
    Case("templates.*.security.privileged", True),
    Case("templates.*.security.no_new_privileges", False),
    Case("templates.*.env", {"MODE": "y", "TOKEN": {"secret": "apiToken"}}),
    Case("templates.*.env.*.secret", "apiToken2"),
    Case("templates.*.user", "20001:20001", secrets=True),
    Case("templates.*.workdir", "/home"),
    Case("templates.*.description", "another agent"),
    Case("templates.*.base_image", "busybox:1.37"),
    Case("templates.*.snapshot", {"version": "2", "setup": ["true"]}),
    Case("templates.*.snapshot.version", "2"),
    Case("templates.*.snapshot.setup", ["true", "echo more"]),
    Case("templates.*.snapshot.files", [{"source": "files/tool.sh", "path": "/usr/local/bin/tool", "mode": "0755"},
                                        {"source": "files/other.sh", "path": "/usr/local/bin/other"}]),
    Case("templates.*.snapshot.files[].source", "files/other.sh", at="templates.agent.snapshot.files.0.source"),
    Case("templates.*.snapshot.files[].path", "/usr/local/bin/tool2"),
    Case("templates.*.snapshot.files[].mode", "0700"),
    Case("templates.*.snapshot.push_to", "registry.example.com/agent", xfail=PUSH_UNMAPPED,
         raises=UnsupportedResourceError),
    Case("templates.*.secrets", [{"secret": "githubToken", "path": "/run/secrets/github-token"},
                                 {"secret": "apiToken", "path": "/run/secrets/api-token"}], secrets=True,
         xfail=SECRETS_SEEDER),
    Case("templates.*.secrets[].secret", "githubToken2", secrets=True, xfail=SECRETS_SEEDER),
    Case("templates.*.secrets[].path", "/run/secrets/gh", secrets=True, xfail=SECRETS_SEEDER),
    Case("templates.*.entrypoint", ["/bin/sh", "-ec"]),
    Case("templates.*.command", ["sleep 3600"]),
    Case("templates.*.readiness", {"command": ["true"], "interval": "7s"}, xfail=PROBE_MIXED),
    Case("templates.*.readiness.command", ["test", "-e", "/tmp"]),
    Case("templates.*.readiness.interval", "7s", xfail=PROBE_MIXED),
    Case("templates.*.readiness.timeout", "3s"),
    Case("templates.*.readiness.retries", 5),
    Case("templates.*.readiness.start_period", "3s"),
    Case("templates.*.ports", [{"port": 8080, "exposure": "host", "host_port": 18080, "name": "http"},
                               {"port": 9090, "exposure": "public"}]),
    Case("templates.*.ports[].port", 8081),
    Case("templates.*.ports[].protocol", "udp"),
    Case("templates.*.ports[].exposure", "public"),
    Case("templates.*.ports[].host_port", 18081),
    Case("templates.*.ports[].name", "web"),
    # --- pools
    Case("pools.*.template", "free", xfail=POOL_TEMPLATE_MIXED),
    Case("pools.*.hosts", [HOST, "other"], prepare=setting(hosts__other={
        "endpoint": "ssh://deploy@other.example.com", "capacity": {"cpus": 8, "memory": "16GiB", "disk": "100GiB",
                                                             "gpus": [{"type": "nvidia-l4", "count": 2}]}}),
         xfail=POOL_HOSTS_ADDED),
    Case("pools.*.replicas", 2, prepare=setting(templates__agent__ports__0__host_port=None), xfail=REPLICAS_MIXED),
    Case("pools.*.description", "more agents"),
]
CASE_IDS = [c.id for c in CASES]

# --- classification ------------------------------------------------------------------------------------

PROVIDER = f"sandstack-{HOST}-provider"
HOST_OBJECTS = {f"sandstack-{HOST}-{role}" for role in
                ("provider", "infra", "guard-state", "guard-container", "gateway-log", "gateway-container", "egress-net")}
POOL_NETWORK = re.compile(rf"^sandstack-{HOST}-net\.(?P<pool>[a-z0-9-]+)$")
SANDBOX = re.compile(rf"^sandstack-(?P<pool>[a-z0-9-]+)\.{HOST}-[0-9]+$")
SECRETS_OBJECT = re.compile(rf"^sandstack-(?P<pool>[a-z0-9-]+)\.{HOST}-secrets(-seeder)?$")


def is_host_object(name: str) -> bool:
    return name in HOST_OBJECTS or bool(POOL_NETWORK.match(name))


def _changes(before, after) -> dict[str, tuple[str, ...]]:
    """What the second run did, by "<kind> <logical name>" → changed inputs. The harness applies no provider
    (its id depends only on the URN), so a change of the provider's inputs is listed as its update."""
    out = {f"{a.kind} {a.name}": a.changed for a in after.actions if a.kind != "same"}
    old, new = (next(r.inputs for r in run.registrations.values() if r.name == PROVIDER) for run in (before, after))
    if old != new:
        out[f"update {PROVIDER}"] = tuple(sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k)))
    return out


def _sandboxes(result, pools: tuple[str, ...]) -> set[str]:
    return {name for name in (r.name for r in result.registrations.values())
            if (m := SANDBOX.match(name)) and m["pool"] in pools}


def expected_problems(effect: str, case: Case, before, after) -> list[str]:
    """How the second run differs from what `effect` promises (empty: it keeps the promise)."""
    changes = _changes(before, after)
    pools = case.affected()
    sandboxes = _sandboxes(before, pools) | _sandboxes(after, pools)
    if effect == "none":
        expected = {}
    elif effect == "in-place":
        expected = {f"update {s}" for s in sandboxes}
    elif effect == "replace":
        expected = {f"replace {s}" for s in sandboxes}
        if case.secrets:
            expected |= {k for k in changes if (m := SECRETS_OBJECT.match(k.split(" ", 1)[1])) and m["pool"] in pools}
    elif effect == "rebuild":
        template = before_template(case)
        image = f"sandstack-{template}.{HOST}-image"
        expected = {f"replace {image}", f"delete {image}"} | {f"replace {s}" for s in sandboxes}
    elif effect == "host":
        host_changes = {k for k in changes if is_host_object(k.split(" ", 1)[1])}
        if not host_changes:
            return [f"no host-level object changed: {changes}"]
        moved = {m["pool"] for k in changes if k.startswith("replace ") and (m := POOL_NETWORK.match(k[8:]))}
        expected = set(host_changes)
        for key, fields in changes.items():
            name = key.split(" ", 1)[1]
            sandbox = SANDBOX.match(name)
            if "<provider>" in fields or (sandbox and sandbox["pool"] in moved and key.startswith("replace ")):
                expected.add(key)
            # The secrets seeder runs once on the infra image: a new infra image re-runs it.
            if SECRETS_OBJECT.match(name) and fields == ("image",) and f"replace sandstack-{HOST}-infra" in changes:
                expected.add(key)
            if key.startswith("delete ") and f"replace {name}" in expected:
                expected.add(key)  # the old object of a create-before-delete replacement
    else:
        raise AssertionError(effect)
    if set(changes) == set(expected):
        return []
    unexpected = {k: changes[k] for k in sorted(set(changes) - set(expected))}
    missing = sorted(set(expected) - set(changes))
    return [f"declared {effect!r}: unexpected {unexpected}, missing {missing}"]


def before_template(case: Case) -> str:
    return "agent" if case.path.startswith("templates.") else "free"


# --- the tests -----------------------------------------------------------------------------------------


@pytest.fixture
def apply(dry_harness, tmp_path: Path):
    """`apply(spec_dict)` → RunResult: one `pulumi up` of the spec, with the matrix's secrets set."""
    folder = tmp_path / "spec"

    def run(data: dict):
        write_spec(folder, data, FILES)
        return dry_harness.run(stack_program(folder / "stack.yaml"), secret_config=SECRETS)
    return run


def test_every_model_field_has_a_case():
    covered = {c.path for c in CASES} | set(EXEMPT)
    assert len(set(CASE_IDS)) == len(CASES), "case ids are unique"
    assert not {c.path for c in CASES} & set(EXEMPT), "an exempt field has a case"
    assert sorted(set(DECLARED) - covered) == [], "add a change-matrix case for each new field"
    assert sorted(covered - set(DECLARED)) == [], "a case or exemption names no model field"


def test_the_base_stack_is_rich_enough_and_stable(apply):
    first = apply(BASE)
    names = {a.name for a in first.actions}
    assert HOST_OBJECTS - {PROVIDER} <= names and {f"sandstack-{p}.{HOST}-0" for p in ("agent", "free")} <= names
    assert {f"sandstack-agent.{HOST}-secrets", f"sandstack-agent.{HOST}-secrets-seeder"} <= names
    assert _changes(first, apply(BASE)) == {}


def _params():
    for case in CASES:
        marks = [pytest.mark.xfail(strict=True, raises=case.raises, reason=case.xfail)] if case.xfail else []
        yield pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", list(_params()))
def test_a_field_change_does_what_its_declaration_says(apply, case: Case):
    base = copy.deepcopy(BASE)
    if case.prepare:
        case.prepare(base)
    after_spec = copy.deepcopy(base)
    _set(after_spec, case.spec_path(), case.value)
    before = apply(base)
    after = apply(after_spec)
    problems = expected_problems(DECLARED[case.path], case, before, after)
    assert not problems, f"{case.path} ({case.spec_path()} → {case.value!r}): {problems[0]}"
