"""The change matrix: every spec field's declared change effect, proven on the dry harness.

Each field of the spec models (walked from `Stack`, sandstack.spec.walk) has a case below: a value it
changes to in the rich fixture `BASE` (two pools on one local host: `agent`, an allow-list pool with its
own template that sets nearly every field, readiness, a port, secret env and a secret file, a snapshot
with setup and a file; `free`, an allow-all pool whose template inherits everything from `defaults` and
the `small` profile). The base is applied, then the changed spec, and what the second `pulumi up` did
(created/updated/replaced/deleted resources, by logical name) must be exactly what the field's declared
`Effect` (sandstack.spec.changes; the README reference's Change column) promises, nothing more and
nothing less:

- sandboxes: 'update' / 'replace' each sandbox of the affected pools; 'scale' creates or deletes them.
- snapshot: 'rebuild' replaces the pools' template images (the old image is deleted at the end of the
  run); 'switch' creates or deletes the images of the old and new templates as they fall out of use.
- secrets: the pools' secrets objects change (required where a pool has them).
- host: each named role (provider, infra, guard, gateway, networks, ingress, runtime, logger) changes where the
  host has it (an object of the role before or after: a host without an ingress or a gateway pool has none to
  renew), and no other host object changes. A declaration always names its roles (`Effect` refuses anything
  else), so no case accepts "some host objects".
- consequences: everything on a replaced provider (`<provider>`), the sandboxes of a replaced pool
  network, a seeder re-run on a new infra image (`image` only), the old object of a replace.
- scope: 'pools' (below), 'host' (every pool on the host), 'placement' (objects on other hosts only: the
  named roles are those renewed on the hosts the pool is added to or taken off, nothing changes here).
The dry harness gives providers no diff, so a change of the provider's inputs is counted as its update.

The "affected pools" of a case are `agent` for `templates.*` and `pools.*` fields, `free` for `defaults.*`
and `profiles.*` fields (the `agent` template sets those itself), unless the case says otherwise. A
declaration's `when` conditions each have a case whose `prepare` sets the condition up.

`test_every_model_field_has_a_case` fails when a model field has neither a case nor an entry in
`EXEMPT` (a short list, each with its reason), or a declared condition has no case (unless `NO_SUCH_CASE`
says why the condition cannot hold at that path).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Callable

import pytest

from sandstack.spec import changes as table
from sandstack.spec.changes import (BUILTIN_TMPFS, DEVICES_REASSIGNED, DIRECT_ROUTE, IN_INGRESS_TLS, INGRESS_HOST,
                                    NO_IDLE_TIMEOUT, NOTHING_INHERITED_CHANGES, PIDS_UNCHANGED, ROUTE_KEPT, ROUTING,
                                    RUNTIME_HOST, SETUP_GATEWAY, UNLOGGED_ALLOW_ALL, URL_AND_ROUTING, URL_PORTS,
                                    URL_PORTS_AND_RUNTIME, URL_PORTS_CHANGE, Condition, Effect)
from sandstack.spec.changes import DISK_WORKSPACE as DISK
from sandstack.spec.models import Stack
from sandstack.spec.models.base import change_of
from sandstack.spec.roles import HOST_ROLES
from sandstack.spec.walk import model_fields

HOST = "local"
SECRETS = {"runtimeToken": "a-runtime-token-of-32-characters", "runtimeToken2": "another-runtime-token-32-chars..",
           "tenantToken": "a-tenant-token-of-32-characters.", "tenantToken2": "another-tenant-token-32-chars...",
           "apiToken": "tok", "apiToken2": "tok2", "githubToken": "gh", "githubToken2": "gh2",
           "sharedToken": "shared", "sharedToken2": "shared2", "caPem": "CA", "caPem2": "CA2",
           "certPem": "CERT", "certPem2": "CERT2", "keyPem": "KEY", "keyPem2": "KEY2",
           "sshHostKey": "HOST KEY", "sshHostKey2": "HOST KEY 2", "storePassword": "store-password",
           "storePassword2": "store-password-2", "storeCa": "STORE CA", "storeCa2": "STORE CA 2"}
FILES = {"files/tool.sh": "echo tool\n", "files/other.sh": "echo other\n", "skills/a.md": "# a\n",
         "skills/b.md": "# b\n"}

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
        # No GPUs: a GPU pool placed after another would take devices that pool's changes move (see GPU_LATER).
        "small": {"cpus": 1, "memory": "512MiB", "disk": "512MiB", "pids": 128, "open_files": 1024},
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
            "data": [{"source": "skills", "path": "/opt/skills"}],
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

DECLARED: dict[str, Effect] = {path: change_of(info) for path, info in model_fields(Stack).items()}

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

# Conditions of a model shared by two places, which cannot hold at one of them: a TLS secret reference of the
# Docker endpoint is never in the ingress's TLS.
NO_SUCH_CASE = {
    (f"hosts.*.tls.{item}.secret", IN_INGRESS_TLS): "the Docker endpoint's TLS, never the ingress's"
    for item in ("ca", "cert", "key")
}

# --- cases ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    path: str  # the model path, as in DECLARED
    value: Any  # the new value
    at: str | None = None  # the concrete spec path (default: '*' → the default key, '[]' → item 0)
    prepare: Callable[[dict], None] | None = None  # adjusts the base for this case (applied to both runs)
    pools: tuple[str, ...] | None = None  # the affected pools (default: by prefix, see the docstring)
    condition: Condition | None = None  # one of the declaration's `when` conditions, which `prepare` sets up
    xfail: str | None = None
    raises: type[BaseException] = AssertionError  # how an xfail case fails: the matrix's own assertion
    variant: str = ""  # a second case of one field (e.g. under a condition its description names)

    @property
    def id(self) -> str:
        variant = self.variant or self.condition
        return f"{self.path}#{variant}" if variant else self.path

    def effect(self) -> Effect:
        return DECLARED[self.path].under(self.condition)

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
# Each connection bound, and the block (tighter values: any change renews the guard's rules alike; a pool's bound
# stays at least the sandbox's, rule connection-bounds).
CONNECTION_CHANGES = (("", {"rate": 10, "open": 64}), (".rate", 10), (".pool_rate", 200), (".open", 64),
                      (".pool_open", 2048))
FREE_ALLOW_LIST = setting(defaults__network={"egress": "allow-list", "allow": ["example.org"]})
AGENT_ALLOW_ALL = setting(templates__agent__network={"egress": "allow-all", "deny": ["203.0.113.7"]})
# `free` (which takes the defaults' network) with a setup step: its build goes through the gateway where it does.
FREE_SETUP = {"version": "1", "setup": ["true"]}
# The agent's image without setup steps: its build reaches no network (docs/design/setup-policy.md).
AGENT_NO_SETUP = setting(templates__agent__snapshot__setup=[])
WRITABLE_ROOT = setting(hosts__local__storage_quota=True, templates__agent__filesystem={
    "read_only_root": False, "writable": [{"path": "/tmp", "size": "64MiB"}], "shm_size": "16MiB"})

FREE_BASE_FROM_DEFAULTS = setting(templates__free__base_image=None, defaults__base_image="busybox:1.36")
DEFAULT_FILES = setting(defaults__snapshot={"version": "2", "files": [
    {"source": "files/tool.sh", "path": "/usr/local/bin/tool", "mode": "0755"}]})
NNP_UNSET = setting(templates__agent__security__no_new_privileges=None, defaults__security__no_new_privileges=None)
GPU_POOLS = ("agent",)  # the base's pools with a GPU request (scope 'gpu')
MIXED_GPUS = setting(hosts__local__capacity__gpus=[{"type": "nvidia-a100", "count": 1},
                                                  {"type": "nvidia-l4", "count": 8}])
L4_IDS = setting(hosts__local__capacity__gpus=[{"type": "nvidia-l4", "count": 8,
                                                "ids": ["0", "1", "2", "3", "4", "5", "6", "7"]}])
NO_IDLE = setting(templates__agent__lifecycle__idle_timeout=None, defaults__lifecycle__idle_timeout=None)
HOST_DISK = setting(hosts__local__disk_workspaces="1GiB")
WITH_WORK = [{"path": "/tmp", "size": "64MiB"}, {"path": "/work", "type": "disk", "size": "32MiB"}]
AGENT_DISK = setting(hosts__local__disk_workspaces="1GiB", templates__agent__filesystem__writable=WITH_WORK)
URL_PORT = [{"port": 8080, "exposure": "url", "name": "http"}]
HOST_INGRESS = setting(hosts__local__ingress={"domain": "sbx.example.com"}, templates__agent__ports__0__host_port=None)
INGRESS = setting(hosts__local__ingress={"domain": "sbx.example.com"}, templates__agent__ports=URL_PORT)
INGRESS_TLS = setting(hosts__local__ingress={"domain": "sbx.example.com", "tls": {
    "cert": {"secret": "certPem"}, "key": {"secret": "keyPem"}}}, templates__agent__ports=URL_PORT)
RUNTIME = setting(hosts__local__runtime={"token": {"secret": "runtimeToken"}})
# `agent` with network profiles instead of its `network` (a runtime to switch them).
PROFILES = {"start": "open", "profiles": {"open": {"egress": "allow-list", "allow": ["example.com"]},
                                          "locked": {"egress": "deny-all"}}}
AGENT_PROFILES = setting(templates__agent__network=None, templates__agent__network_profiles=PROFILES,
                         hosts__local__runtime={"token": {"secret": "runtimeToken"}})
PROFILE_ADDED = {**PROFILES["profiles"], "docs": {"egress": "allow-list", "allow": ["docs.example.org"]}}
PROFILE_EDITED = {**PROFILES["profiles"], "open": {"egress": "allow-list", "allow": ["example.com", "example.org"]}}
RUNTIME_TOKEN = setting(hosts__local__runtime={"token": {"secret": "runtimeToken"},
                                               "tokens": {"tenant": {"secret": "tenantToken", "pools": ["agent"]}}})
RUNTIME_SSH = setting(hosts__local__runtime={"token": {"secret": "runtimeToken"},
                                             "ssh": {"port": 2222, "host_key": {"secret": "sshHostKey"}}})
STORE = {"registry": "https://registry.example.com", "username": "snapshots", "password": {"secret": "storePassword"},
         "ca": {"secret": "storeCa"}}
RUNTIME_STORE = setting(hosts__local__runtime={"token": {"secret": "runtimeToken"}, "snapshot_store": STORE})
FREE_DISK = setting(hosts__local__disk_workspaces="1GiB", defaults__filesystem__writable=WITH_WORK)
# An ingress with a url port of `agent` that also publishes one, and a runtime: every host role a template holds.
EVERY_ROLE = setting(hosts__local__ingress={"domain": "sbx.example.com"},
                     hosts__local__runtime={"token": {"secret": "runtimeToken"}},
                     templates__agent__ports=[{"port": 8080, "exposure": "host", "name": "http"},
                                              {"port": 9090, "exposure": "url"}])
# `agent` with on-demand places (a ceiling above its warm count, so a runtime holds their recipe; no secret in the
# environment: rule ondemand-secret-env).
ONDEMAND = setting(pools__agent__max=3, hosts__local__runtime={"token": {"secret": "runtimeToken"}},
                   templates__agent__ports__0__host_port=None, templates__agent__env__TOKEN=None,
                   defaults__env__SHARED=None)
INGRESS_AND_RUNTIME = setting(hosts__local__ingress={"domain": "sbx.example.com"}, templates__agent__ports=URL_PORT,
                              hosts__local__runtime={"token": {"secret": "runtimeToken"}})

def session_and_disk_cases(scope: str, at: str, disk: Callable[[dict], None], *, workspace: str) -> list[Case]:
    """The runtime's session policy and the disk workspace cases, alike for `defaults` (the `free` pool) and a
    template (`agent`): `at` is the concrete spec path of the scope, `disk` the prepare giving it a disk path."""
    def on_disk(field: str) -> str:
        return f"{at}.filesystem.writable.1.{field}"

    return [
        Case(f"{scope}.session", {"idle": "stop"}, prepare=RUNTIME),
        Case(f"{scope}.session.workspace", workspace, prepare=RUNTIME),
        Case(f"{scope}.session.idle", "reset", prepare=RUNTIME),
        Case(f"{scope}.session.idle_after", "5m", prepare=RUNTIME),
        Case(f"{scope}.session.snapshots", 3, prepare=RUNTIME),
        Case(f"{scope}.session.snapshot_max_age", "1d", prepare=RUNTIME),
        Case(f"{scope}.session.upload_limit", "1MiB", prepare=RUNTIME),
        Case(f"{scope}.session.download_limit", "2GiB", prepare=RUNTIME),
        Case(f"{scope}.session.snapshot_storage", "1GiB", prepare=RUNTIME),
        Case(f"{scope}.session.session_snapshot_storage", "1GiB", prepare=RUNTIME),
        Case(f"{scope}.session.session_snapshots", 3, prepare=RUNTIME),
        Case(f"{scope}.session.session_snapshot_max_age", "1d", prepare=RUNTIME),
        Case(f"{scope}.session.exec_max_timeout", "2h", prepare=RUNTIME),
        Case(f"{scope}.session.exec_output_limit", "2MiB", prepare=RUNTIME),
        Case(f"{scope}.session.terminal_idle", "10m", prepare=RUNTIME),
        Case(f"{scope}.session.wakes_per_hour", 10, prepare=RUNTIME),
        Case(f"{scope}.urls", {"auth": "session"}, prepare=INGRESS_AND_RUNTIME),
        Case(f"{scope}.urls.auth", "session", prepare=INGRESS_AND_RUNTIME),
        Case(f"{scope}.filesystem.writable[].exec", True, at=on_disk("exec"), prepare=disk, condition=DISK),
        Case(f"{scope}.filesystem.writable[].size", "64MiB", at=on_disk("size"), prepare=disk, condition=DISK),
        Case(f"{scope}.filesystem.writable[].path", "/work2", at=on_disk("path"), prepare=disk,
             variant="a disk workspace keeps its volume"),
        Case(f"{scope}.filesystem.writable[].type", "disk", prepare=HOST_DISK),
        Case(f"{scope}.filesystem.writable[].seed", True, at=on_disk("seed"), prepare=disk),
        Case(f"{scope}.filesystem.writable", WITH_WORK, prepare=HOST_DISK, condition=DISK),
        Case(f"{scope}.filesystem", {"read_only_root": True, "writable": WITH_WORK}, prepare=HOST_DISK,
             condition=DISK),
    ]


CASES: list[Case] = [
    # --- stack
    Case("version", 1, prepare=None),
    Case("description", "another"),
    # --- hosts
    Case("hosts.*.endpoint", "ssh://deploy@docker.example.com"),
    Case("hosts.*.tls", {"ca": {"secret": "caPem2"}, "cert": {"secret": "certPem2"}, "key": {"secret": "keyPem2"}},
         prepare=TCP_TLS),
    Case("hosts.*.tls.ca", {"secret": "caPem2"}, prepare=TCP_TLS),
    Case("hosts.*.tls.ca.secret", "caPem2", prepare=TCP_TLS),
    Case("hosts.*.tls.cert", {"secret": "certPem2"}, prepare=TCP_TLS),
    Case("hosts.*.tls.cert.secret", "certPem2", prepare=TCP_TLS),
    Case("hosts.*.tls.key", {"secret": "keyPem2"}, prepare=TCP_TLS),
    Case("hosts.*.tls.key.secret", "keyPem2", prepare=TCP_TLS),
    Case("hosts.*.ssh_opts", ["-p", "2222"], prepare=SSH),
    Case("hosts.*.capacity", {"cpus": 32, "memory": "128GiB", "disk": "512GiB",
                              "gpus": [{"type": "nvidia-l4", "count": 4}]}),
    Case("hosts.*.capacity.cpus", 32),
    Case("hosts.*.capacity.memory", "128GiB"),
    Case("hosts.*.capacity.disk", "512GiB"),
    Case("hosts.*.capacity.gpus", [{"type": "nvidia-l4", "count": 4}, {"type": "nvidia-a100", "count": 1}]),
    Case("hosts.*.capacity.gpus", [{"type": "nvidia-a100", "count": 1}, {"type": "nvidia-l4", "count": 4}],
         condition=DEVICES_REASSIGNED),
    Case("hosts.*.capacity", {"cpus": 64, "memory": "256GiB", "disk": "1TiB", "gpus": [
        {"type": "nvidia-a100", "count": 1}, {"type": "nvidia-l4", "count": 8}]}, condition=DEVICES_REASSIGNED),
    Case("hosts.*.capacity.gpus[].type", "nvidia-l4", prepare=MIXED_GPUS, condition=DEVICES_REASSIGNED),
    Case("hosts.*.capacity.gpus[].count", 2, prepare=MIXED_GPUS, condition=DEVICES_REASSIGNED),
    Case("hosts.*.capacity.gpus[].ids", ["0", "1", "2", "3", "4", "5", "7", "6"], prepare=L4_IDS),
    Case("hosts.*.capacity.gpus[].ids", ["GPU-aaaa0001", "1", "2", "3", "4", "5", "6", "7"], prepare=L4_IDS,
         condition=DEVICES_REASSIGNED),
    Case("hosts.*.capacity.gpus[].type", "nvidia-l4x", prepare=setting(
        templates__agent__limits__gpus={"count": 1}, profiles__small__gpus={"count": 1})),
    Case("hosts.*.capacity.gpus[].count", 4),
    Case("hosts.*.overcommit", {"cpus": 4, "memory": 2, "disk": 2}),
    Case("hosts.*.overcommit.cpus", 4),
    Case("hosts.*.overcommit.memory", 2),
    Case("hosts.*.overcommit.disk", 2),
    Case("hosts.*.storage_quota", True),
    Case("hosts.*.platforms", ["linux/amd64", "linux/arm64"]),
    Case("hosts.*.disk_workspaces", "2GiB"),
    Case("hosts.*.dns_upstream", ["10.0.0.53"]),
    Case("hosts.*.runtime", {"token": {"secret": "runtimeToken"}}),
    Case("hosts.*.runtime", {"token": {"secret": "runtimeToken"}}, prepare=INGRESS, condition=INGRESS_HOST),
    Case("hosts.*.runtime.port", 7481, prepare=RUNTIME),
    # Beside an ingress too, the runtime alone: the ingress reaches it by its socket, not its port.
    Case("hosts.*.runtime.port", 7481, prepare=INGRESS_AND_RUNTIME, variant="beside an ingress"),
    Case("hosts.*.runtime.exposure", "public", prepare=RUNTIME),
    Case("hosts.*.runtime.token", {"secret": "runtimeToken2"}, prepare=RUNTIME),
    Case("hosts.*.runtime.token.secret", "runtimeToken2", prepare=RUNTIME),
    Case("hosts.*.runtime.token", {"secret": "runtimeToken2"}, prepare=INGRESS_AND_RUNTIME, condition=INGRESS_HOST),
    Case("hosts.*.runtime.token.secret", "runtimeToken2", prepare=INGRESS_AND_RUNTIME, condition=INGRESS_HOST),
    Case("hosts.*.runtime.tokens", {"tenant": {"secret": "tenantToken", "pools": ["agent"]}}, prepare=RUNTIME),
    Case("hosts.*.runtime.tokens.*.secret", "tenantToken2", at="hosts.local.runtime.tokens.tenant.secret",
         prepare=RUNTIME_TOKEN),
    Case("hosts.*.runtime.tokens.*.pools", ["agent", "free"], at="hosts.local.runtime.tokens.tenant.pools",
         prepare=RUNTIME_TOKEN),
    Case("hosts.*.runtime.ssh", {"host_key": {"secret": "sshHostKey"}}, prepare=RUNTIME),
    Case("hosts.*.runtime.ssh.port", 2223, prepare=RUNTIME_SSH),
    Case("hosts.*.runtime.ssh.host_key", {"secret": "sshHostKey2"}, prepare=RUNTIME_SSH),
    Case("hosts.*.runtime.ssh.host_key.secret", "sshHostKey2", prepare=RUNTIME_SSH),
    Case("hosts.*.runtime.snapshot_store", {k: v for k, v in STORE.items() if k != "ca"}, prepare=RUNTIME),
    Case("hosts.*.runtime.snapshot_store.registry", "https://registry2.example.com:5000", prepare=RUNTIME_STORE),
    Case("hosts.*.runtime.snapshot_store.repository", "sandstack/other", prepare=RUNTIME_STORE),
    Case("hosts.*.runtime.snapshot_store.username", "snapshots2", prepare=RUNTIME_STORE),
    Case("hosts.*.runtime.snapshot_store.password", {"secret": "storePassword2"}, prepare=RUNTIME_STORE),
    Case("hosts.*.runtime.snapshot_store.password.secret", "storePassword2", prepare=RUNTIME_STORE),
    Case("hosts.*.runtime.snapshot_store.ca", {"secret": "storeCa2"}, prepare=RUNTIME_STORE),
    Case("hosts.*.runtime.snapshot_store.ca.secret", "storeCa2", prepare=RUNTIME_STORE),
    # Read by the runtime at each request: its configuration reloaded, nothing renewed.
    Case("hosts.*.runtime.ssh.forwarding", "local", prepare=RUNTIME_SSH),
    Case("hosts.*.runtime.ssh.max_connections_per_source", 4, prepare=RUNTIME_SSH),
    Case("hosts.*.ingress", {"domain": "sbx.example.com"}),
    # Beside a runtime, nothing of the runtime's changes (its socket and wake token are there without an ingress).
    Case("hosts.*.ingress", {"domain": "sbx.example.com"}, prepare=RUNTIME, variant="beside a runtime"),
    Case("hosts.*.ingress.domain", "sbx2.example.com", prepare=INGRESS),
    Case("hosts.*.ingress.domain", "sbx2.example.com", prepare=INGRESS_AND_RUNTIME, variant="beside a runtime"),
    Case("hosts.*.ingress.port", 8443, prepare=INGRESS),
    Case("hosts.*.ingress.exposure", "host", prepare=INGRESS),
    Case("hosts.*.ingress.tls", {"cert": {"secret": "certPem"}, "key": {"secret": "keyPem"}}, prepare=INGRESS),
    Case("hosts.*.ingress.tls.cert", {"secret": "certPem2"}, prepare=INGRESS_TLS),
    Case("hosts.*.ingress.tls.cert.secret", "certPem2", prepare=INGRESS_TLS, condition=IN_INGRESS_TLS),
    Case("hosts.*.ingress.tls.key", {"secret": "keyPem2"}, prepare=INGRESS_TLS),
    Case("hosts.*.ingress.tls.key.secret", "keyPem2", prepare=INGRESS_TLS, condition=IN_INGRESS_TLS),
    Case("hosts.*.ingress.acme_email", "ops@example.com", prepare=INGRESS),
    Case("hosts.*.disk_workspaces", "2GiB", prepare=AGENT_DISK, variant="with disk workspaces"),
    Case("hosts.*.subnet_pool", "10.99.0.0/16"),
    Case("hosts.*.subnet_pool", "10.99.0.0/16", prepare=INGRESS_AND_RUNTIME, condition=URL_PORTS),
    Case("hosts.*.infra_image", "registry.example.com/sandstack-infra:2",
         prepare=setting(hosts__local__infra_image="registry.example.com/sandstack-infra:1")),
    Case("hosts.*.infra_image", "registry.example.com/sandstack-infra:2", prepare=INGRESS_AND_RUNTIME,
         variant="with an ingress and a runtime"),
    Case("hosts.*.labels", {"team": "agents"}),
    Case("hosts.*.labels", {"team": "agents"}, prepare=INGRESS_AND_RUNTIME, variant="with an ingress and a runtime"),
    Case("hosts.*.labels", {"team": "agents"}, prepare=AGENT_DISK, variant="with disk workspaces"),
    # --- profiles (the `free` pool's limits come from `small`)
    Case("profiles.*.cpus", 2),
    Case("profiles.*.memory", "768MiB"),
    Case("profiles.*.memory", "192MiB", prepare=setting(defaults__filesystem=None, profiles__small__memory="128MiB"),
         condition=BUILTIN_TMPFS),
    Case("profiles.*.disk", "256MiB", prepare=setting(hosts__local__storage_quota=True, defaults__filesystem__read_only_root=False),
         condition=table.WRITABLE_ROOT),
    Case("profiles.*.disk", "256MiB"),
    Case("profiles.*.pids", 256),
    Case("profiles.*.open_files", 2048),
    Case("profiles.*.gpus", {"count": 2}),
    Case("profiles.*.gpus.count", 2),
    Case("profiles.*.gpus.type", "nvidia-a100",
         prepare=setting(hosts__local__capacity__gpus=[{"type": "nvidia-l4", "count": 8},
                                                       {"type": "nvidia-a100", "count": 8}],
                         profiles__small__gpus={"count": 1, "type": "nvidia-l4"})),
    # --- defaults (the `free` template inherits them all)
    Case("defaults.limits", {"profile": "small", "cpus": 3, "memory": "1GiB"}, condition=PIDS_UNCHANGED),
    Case("defaults.limits.cpus", 3),
    Case("defaults.limits.memory", "1GiB"),
    Case("defaults.limits.memory", "192MiB", prepare=setting(defaults__filesystem=None, defaults__limits__memory="128MiB"),
         condition=BUILTIN_TMPFS),
    Case("defaults.limits.disk", "256MiB", prepare=setting(hosts__local__storage_quota=True, defaults__filesystem__read_only_root=False),
         condition=table.WRITABLE_ROOT),
    Case("defaults.limits.disk", "256MiB"),
    Case("defaults.limits.pids", 256),
    Case("defaults.limits.open_files", 2048),
    Case("defaults.limits.gpus", {"count": 2}),
    Case("defaults.limits.gpus.count", 2, prepare=setting(defaults__limits__gpus={"count": 1})),
    Case("defaults.limits.gpus.type", "nvidia-a100", prepare=setting(
        defaults__limits__gpus={"count": 1, "type": "nvidia-l4"},
        hosts__local__capacity__gpus=[{"type": "nvidia-l4", "count": 8}, {"type": "nvidia-a100", "count": 8}])),
    Case("defaults.limits", {"profile": "small", "cpus": 3, "memory": "1GiB", "pids": 200}),
    Case("defaults.limits.profile", "big"),
    Case("defaults.limits.profile", "big", prepare=setting(profiles__big__pids=128), condition=PIDS_UNCHANGED),
    Case("defaults.network", {"egress": "allow-all", "log": False}),
    Case("defaults.network", {"egress": "allow-all", "deny": ["blocked.example.com", "other.example.com"],
                              "allow_metadata": True}, condition=ROUTE_KEPT),
    Case("defaults.network.egress", "deny-all", prepare=setting(defaults__network={"egress": "allow-all"})),
    Case("defaults.network.egress", "deny-all", condition=SETUP_GATEWAY,
         prepare=setting(defaults__network={"egress": "allow-all"}, templates__free__snapshot=FREE_SETUP)),
    Case("defaults.network", {"egress": "allow-all", "log": False}, condition=SETUP_GATEWAY,
         prepare=setting(templates__free__snapshot=FREE_SETUP)),
    Case("defaults.network.log", False, condition=SETUP_GATEWAY,
         prepare=setting(defaults__network={"egress": "allow-all"}, templates__free__snapshot=FREE_SETUP)),
    Case("defaults.network.protocols", "any", condition=SETUP_GATEWAY,
         prepare=setting(defaults__network={"egress": "allow-all"}, templates__free__snapshot=FREE_SETUP)),
    Case("defaults.network.egress", "allow-all", prepare=setting(defaults__network={"egress": "deny-all", "log": False}),
         condition=UNLOGGED_ALLOW_ALL),
    Case("defaults.network.allow", ["example.org", "example.net"], prepare=FREE_ALLOW_LIST),
    # A direct route's allow entries are the private addresses the guard lets through: its rules.
    Case("defaults.network.allow", ["10.0.0.5", "10.0.0.6"], condition=DIRECT_ROUTE,
         prepare=setting(defaults__network={"egress": "allow-all", "log": False, "allow": ["10.0.0.5"]})),
    Case("defaults.network.deny", ["blocked.example.com", "other.example.com"]),
    Case("defaults.network.deny", ["203.0.113.7", "203.0.113.8"], condition=DIRECT_ROUTE,
         prepare=setting(defaults__network={"egress": "allow-all", "log": False, "deny": ["203.0.113.7"]})),
    Case("defaults.network.log", False, prepare=setting(defaults__network={"egress": "allow-all"})),
    Case("defaults.network.log", True, prepare=setting(defaults__network={"egress": "allow-all"}), condition=ROUTE_KEPT),
    Case("defaults.network.protocols", "any", prepare=setting(defaults__network={"egress": "allow-all"})),
    Case("defaults.network.protocols", "http", prepare=setting(defaults__network={"egress": "allow-all"}),
         condition=ROUTE_KEPT),
    Case("defaults.network.allow_metadata", True),
    Case("defaults.network.allow_metadata", True, condition=DIRECT_ROUTE,
         prepare=setting(defaults__network={"egress": "allow-all", "log": False})),
    # A direct route's connection bounds (the only route they apply to): the guard's rules.
    *(Case(f"defaults.network.connections{field}", value,
           prepare=setting(defaults__network={"egress": "allow-all", "log": False}))
      for field, value in CONNECTION_CHANGES),
    Case("defaults.runtime", "runsc"),
    Case("defaults.lifecycle", {"max_lifetime": "48h", "idle_timeout": "1h", "on_expiry": "restart"},
    ),
    Case("defaults.lifecycle.max_lifetime", "48h"),
    Case("defaults.lifecycle.idle_timeout", "1h"),
    Case("defaults.lifecycle.on_expiry", "restart"),
    Case("defaults.filesystem", {"read_only_root": True, "writable": [{"path": "/scratch", "size": "32MiB"}]}),
    Case("defaults.filesystem.read_only_root", False, prepare=setting(hosts__local__storage_quota=True)),
    Case("defaults.filesystem.writable", [{"path": "/tmp", "size": "64MiB"}, {"path": "/scratch", "size": "32MiB"}]),
    Case("defaults.filesystem.writable[].path", "/scratch"),
    Case("defaults.filesystem.writable[].size", "128MiB"),
    Case("defaults.filesystem.writable[].exec", True),
    *session_and_disk_cases("defaults", "defaults", FREE_DISK, workspace="/work"),
    Case("defaults.filesystem.shm_size", "32MiB"),
    Case("defaults.security", {"capabilities": ["NET_BIND_SERVICE"], "privileged": False,
                               "no_new_privileges": True},
         prepare=setting(defaults__user="0:0", templates__agent__user="0:0")),
    Case("defaults.security.capabilities", ["NET_BIND_SERVICE"],
         prepare=setting(defaults__user="0:0", templates__agent__user="0:0")),
    Case("defaults.security.privileged", True),
    Case("defaults.security.no_new_privileges", False),
    Case("defaults.security.sudo", True, prepare=NNP_UNSET, pools=("agent", "free")),
    Case("defaults.env", {"LANG": "C", "SHARED": {"secret": "sharedToken"}}, pools=("agent", "free")),
    Case("defaults.env.*.secret", "sharedToken2", pools=("agent", "free")),
    Case("defaults.user", "20001:20001"),
    Case("defaults.base_image", "busybox:1.37", prepare=FREE_BASE_FROM_DEFAULTS),
    Case("defaults.platform", "linux/amd64", prepare=setting(templates__agent__platform="linux/amd64")),
    Case("defaults.snapshot", {"version": "2", "setup": ["true"]}),
    Case("defaults.snapshot.version", "3", prepare=setting(defaults__snapshot={"version": "2"})),
    Case("defaults.snapshot.setup", ["true"], prepare=setting(defaults__snapshot={"version": "2"})),
    Case("defaults.snapshot.setup_network", "none",
         prepare=setting(defaults__snapshot={"version": "2", "setup": ["true"]})),
    Case("defaults.snapshot.files", [{"source": "files/tool.sh", "path": "/usr/local/bin/tool"}],
         prepare=setting(defaults__snapshot={"version": "2"})),
    Case("defaults.snapshot.files[].source", "files/other.sh", prepare=DEFAULT_FILES),
    Case("defaults.snapshot.files[].path", "/usr/local/bin/tool2", prepare=DEFAULT_FILES),
    Case("defaults.snapshot.files[].mode", "0700", prepare=DEFAULT_FILES),
    Case("defaults.snapshot.push_to", "registry.example.com/free"),
    Case("defaults.workdir", "/home"),
    # --- templates (the `agent` template sets each itself)
    Case("templates.*.limits", {"profile": "big"}),
    Case("templates.*.limits", {"profile": "big", "pids": 64}, condition=PIDS_UNCHANGED),
    Case("templates.*.limits.cpus", 3),
    Case("templates.*.limits.memory", "2GiB"),
    Case("templates.*.limits.memory", "2GiB", prepare=ONDEMAND, variant="on-demand places"),
    Case("templates.*.limits.memory", "192MiB", prepare=setting(
        templates__agent__filesystem=None, defaults__filesystem=None, templates__agent__limits__memory="128MiB"),
         condition=BUILTIN_TMPFS),
    Case("templates.*.limits.disk", "256MiB", prepare=WRITABLE_ROOT, condition=table.WRITABLE_ROOT),
    Case("templates.*.limits.disk", "256MiB"),
    Case("templates.*.limits.pids", 128),
    Case("templates.*.limits.open_files", 4096),
    Case("templates.*.limits.gpus", {"count": 2}),
    Case("templates.*.limits.gpus.count", 2),
    Case("templates.*.limits.gpus.type", "nvidia-a100",
         prepare=setting(hosts__local__capacity__gpus=[{"type": "nvidia-l4", "count": 8},
                                                       {"type": "nvidia-a100", "count": 8}])),
    Case("templates.*.limits.profile", "small", prepare=setting(templates__agent__limits={"profile": "big"})),
    Case("templates.*.limits.profile", "small", prepare=setting(templates__agent__limits={"profile": "big"},
                                                                profiles__big__pids=128), condition=PIDS_UNCHANGED),
    Case("templates.*.network", {"egress": "allow-all", "log": False}, condition=SETUP_GATEWAY),
    Case("templates.*.network", {"egress": "allow-all", "log": False}, prepare=AGENT_NO_SETUP,
         variant="no setup steps"),
    Case("templates.*.network", {"egress": "allow-list", "allow": ["example.org"], "allow_metadata": True},
         condition=ROUTE_KEPT),
    Case("templates.*.network.egress", "deny-all", prepare=setting(templates__agent__network={"egress": "allow-all"}),
         condition=SETUP_GATEWAY),
    Case("templates.*.network.egress", "deny-all", variant="no setup steps",
         prepare=setting(templates__agent__network={"egress": "allow-all"}, templates__agent__snapshot__setup=[])),
    Case("templates.*.network.egress", "allow-all", condition=UNLOGGED_ALLOW_ALL,
         prepare=setting(templates__agent__network={"egress": "deny-all", "log": False})),
    Case("templates.*.network.allow", ["example.com", "example.org"]),
    # Logged allow-all: the private destinations the gateway lets through (squid.conf; the resolver forwards a
    # special-use name an entry names).
    Case("templates.*.network.allow", ["10.0.0.5", "db.corp.test"], variant="allow-all",
         prepare=setting(templates__agent__network={"egress": "allow-all", "allow": ["10.0.0.5"]})),
    Case("templates.*.network.allow", ["10.0.0.5", "10.0.0.6"], condition=DIRECT_ROUTE,
         prepare=setting(templates__agent__network={"egress": "allow-all", "log": False, "allow": ["10.0.0.5"]})),
    Case("templates.*.network.allow", ["10.0.0.5", "10.0.0.6"], condition=DIRECT_ROUTE,
         prepare=setting(templates__agent__network={"egress": "allow-all", "protocols": "any", "allow": ["10.0.0.5"]}),
         variant="protocols: any"),
    Case("templates.*.network.deny", ["bad.example.com", "worse.example.com"]),
    Case("templates.*.network.deny", ["203.0.113.7", "203.0.113.8"], condition=DIRECT_ROUTE,
         prepare=setting(templates__agent__network={"egress": "allow-all", "log": False, "deny": ["203.0.113.7"]})),
    Case("templates.*.network.deny", ["203.0.113.7", "203.0.113.8"], condition=DIRECT_ROUTE,
         prepare=setting(templates__agent__network={"egress": "allow-all", "protocols": "any", "deny": ["203.0.113.7"]}),
         variant="protocols: any"),
    Case("templates.*.network.log", False, prepare=AGENT_ALLOW_ALL, condition=SETUP_GATEWAY),
    Case("templates.*.network.log", False, variant="no setup steps",
         prepare=lambda data: (AGENT_ALLOW_ALL(data), AGENT_NO_SETUP(data))),
    Case("templates.*.network.log", True, prepare=AGENT_ALLOW_ALL, condition=ROUTE_KEPT),
    Case("templates.*.network.protocols", "any", prepare=AGENT_ALLOW_ALL, condition=SETUP_GATEWAY),
    Case("templates.*.network.protocols", "any", variant="no setup steps",
         prepare=lambda data: (AGENT_ALLOW_ALL(data), AGENT_NO_SETUP(data))),
    Case("templates.*.network.protocols", "http", prepare=AGENT_ALLOW_ALL, condition=ROUTE_KEPT),
    Case("templates.*.network.allow_metadata", True),
    Case("templates.*.network.allow_metadata", True, condition=DIRECT_ROUTE,
         prepare=setting(templates__agent__network={"egress": "allow-all", "log": False})),
    Case("templates.*.network.allow_metadata", True, condition=DIRECT_ROUTE,
         prepare=setting(templates__agent__network={"egress": "allow-all", "protocols": "any"}), variant="protocols: any"),
    *(Case(f"templates.*.network.connections{field}", value,
           prepare=setting(templates__agent__network={"egress": "allow-all", "protocols": "any"}))
      for field, value in CONNECTION_CHANGES),
    # A template's network profiles: always through the gateway (rule network-profiles), so no single field moves
    # the route (from a `network` of another route is two fields: `network` removed, `network_profiles` added).
    Case("templates.*.network_profiles", {**PROFILES, "profiles": PROFILE_EDITED}, prepare=AGENT_PROFILES,
         condition=table.PROFILE_NAMES_KEPT),
    Case("templates.*.network_profiles", {**PROFILES, "profiles": PROFILE_ADDED}, prepare=AGENT_PROFILES,
         condition=ROUTE_KEPT),
    Case("templates.*.network_profiles.profiles", PROFILE_EDITED, prepare=AGENT_PROFILES,
         condition=table.PROFILE_NAMES_KEPT),
    Case("templates.*.network_profiles.profiles", PROFILE_ADDED, prepare=AGENT_PROFILES),
    Case("templates.*.network_profiles.start", "locked", prepare=AGENT_PROFILES),
    Case("templates.*.runtime", "runsc"),
    Case("templates.*.platform", "linux/amd64"),
    Case("templates.*.lifecycle", {"max_lifetime": "6h", "idle_timeout": "10m", "on_expiry": "restart"},
    ),
    Case("templates.*.lifecycle.max_lifetime", "6h"),
    Case("templates.*.lifecycle.max_lifetime", "6h", prepare=ONDEMAND, variant="on-demand places"),
    Case("templates.*.lifecycle.idle_timeout", "10m"),
    Case("templates.*.lifecycle.on_expiry", "restart"),
    Case("templates.*.filesystem", {"read_only_root": True, "writable": [{"path": "/scratch", "size": "32MiB"}]}),
    Case("templates.*.filesystem.read_only_root", False, prepare=setting(hosts__local__storage_quota=True)),
    Case("templates.*.filesystem.writable", [{"path": "/tmp", "size": "64MiB"}, {"path": "/scratch", "size": "8MiB"}]),
    Case("templates.*.filesystem.writable[].path", "/scratch"),
    Case("templates.*.filesystem.writable[].size", "128MiB"),
    Case("templates.*.filesystem.writable[].exec", True),
    *session_and_disk_cases("templates.*", "templates.agent", AGENT_DISK, workspace="/srv"),
    Case("templates.*.filesystem.shm_size", "32MiB"),
    Case("templates.*.security", {"capabilities": ["NET_BIND_SERVICE"], "no_new_privileges": True},
         prepare=setting(templates__agent__user="0:0")),
    Case("templates.*.security.capabilities", ["NET_BIND_SERVICE"], prepare=setting(templates__agent__user="0:0")),
    Case("templates.*.security.privileged", True),
    Case("templates.*.security.no_new_privileges", False),
    Case("templates.*.security.sudo", True, prepare=NNP_UNSET),
    Case("templates.*.env", {"MODE": "y", "TOKEN": {"secret": "apiToken"}}),
    Case("templates.*.env", {"MODE": "y"}, prepare=ONDEMAND, variant="on-demand places"),
    Case("templates.*.env.*.secret", "apiToken2"),
    Case("templates.*.user", "20001:20001"),
    Case("templates.*.workdir", "/home"),
    Case("templates.*.description", "another agent"),
    # `free` (no settings of its own) starts from `agent`: it inherits everything agent sets.
    Case("templates.*.extends", "agent", at="templates.free.extends", pools=("free",),
         prepare=setting(templates__agent__ports__0__host_port=None)),
    Case("templates.*.extends", "agent", at="templates.free.extends", pools=("free",), prepare=EVERY_ROLE,
         variant="with an ingress and a runtime"),
    Case("templates.*.extends", "free", condition=NOTHING_INHERITED_CHANGES),
    Case("templates.*.base_image", "busybox:1.37"),
    Case("templates.*.snapshot", {"version": "2", "setup": ["true"]}),
    Case("templates.*.snapshot.version", "2"),
    # The runtime's recipe of the places not made yet changes alike (sandstack.spec.changes.in_recipe).
    Case("templates.*.snapshot.version", "2", prepare=ONDEMAND, variant="on-demand places"),
    Case("templates.*.snapshot.setup_network", "none"),
    Case("templates.*.snapshot.version", "2", prepare=setting(templates__agent__snapshot__push_to="registry.example.com/agent"),
         variant="pushed to a registry"),
    Case("templates.*.snapshot.setup", ["true", "echo more"]),
    Case("templates.*.snapshot.files", [{"source": "files/tool.sh", "path": "/usr/local/bin/tool", "mode": "0755"},
                                        {"source": "files/other.sh", "path": "/usr/local/bin/other"}]),
    Case("templates.*.snapshot.files[].source", "files/other.sh", at="templates.agent.snapshot.files.0.source"),
    Case("templates.*.snapshot.files[].path", "/usr/local/bin/tool2"),
    Case("templates.*.snapshot.files[].mode", "0700"),
    Case("templates.*.snapshot.push_to", "registry.example.com/agent"),
    Case("templates.*.secrets", [{"secret": "githubToken", "path": "/run/secrets/github-token"},
                                 {"secret": "apiToken", "path": "/run/secrets/api-token"}]),
    Case("templates.*.secrets[].secret", "githubToken2"),
    Case("templates.*.secrets[].path", "/run/secrets/gh"),
    Case("templates.*.data", [{"source": "skills", "path": "/opt/skills"}, {"source": "files/tool.sh",
                                                                          "path": "/opt/tool"}]),
    Case("templates.*.data[].source", "files"),
    Case("templates.*.data[].path", "/opt/skills2"),
    Case("templates.*.entrypoint", ["/bin/sh", "-ec"]),
    Case("templates.*.command", ["sleep 3600"]),
    Case("templates.*.readiness", {"command": ["true"], "interval": "7s"}),
    Case("templates.*.readiness", {"command": ["true"], "interval": "7s"}, prepare=NO_IDLE, condition=NO_IDLE_TIMEOUT),
    Case("templates.*.readiness.command", ["test", "-e", "/tmp"]),
    Case("templates.*.readiness.interval", "7s"),
    Case("templates.*.readiness.interval", "7s", prepare=NO_IDLE, condition=NO_IDLE_TIMEOUT),
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
    Case("templates.*.ports[].name", "web", prepare=INGRESS, condition=table.URL_PORT),
    Case("templates.*.ports[].port", 8081, prepare=INGRESS, condition=URL_PORTS_CHANGE),
    # The runtime's configuration names no site (each wake names its sandbox): a url port moved leaves it as it is.
    Case("templates.*.ports[].port", 8081, prepare=INGRESS_AND_RUNTIME, condition=URL_PORTS_CHANGE,
         variant="beside a runtime"),
    Case("templates.*.ports[].port", 8081, condition=URL_PORTS_CHANGE, variant="on-demand beside a runtime",
         prepare=setting(hosts__local__ingress={"domain": "sbx.example.com"}, pools__agent__max=3,
                         hosts__local__runtime={"token": {"secret": "runtimeToken"}}, templates__agent__ports=URL_PORT,
                         templates__agent__env__TOKEN=None, defaults__env__SHARED=None)),
    Case("templates.*.ports[].exposure", "url", prepare=HOST_INGRESS, condition=URL_AND_ROUTING),
    Case("templates.*.ports[].exposure", "url", condition=URL_PORTS_CHANGE, prepare=setting(
        hosts__local__ingress={"domain": "sbx.example.com"},
        templates__agent__ports=[{"port": 8080, "exposure": "host"}, {"port": 9090, "exposure": "public"}])),
    Case("templates.*.ports[].exposure", "none", condition=ROUTING,
         prepare=setting(templates__agent__ports=[{"port": 8080, "exposure": "host"}])),
    Case("templates.*.ports", URL_PORT, prepare=HOST_INGRESS, condition=URL_AND_ROUTING),
    Case("templates.*.ports", [{"port": 8080, "exposure": "host", "name": "http"}, {"port": 9090, "exposure": "url"}],
         prepare=HOST_INGRESS, condition=URL_PORTS_CHANGE),
    Case("templates.*.ports", [], condition=ROUTING),
    # --- pools
    Case("pools.*.template", "free"),
    Case("pools.*.template", "free", prepare=EVERY_ROLE, variant="with an ingress and a runtime"),
    Case("pools.*.hosts", [HOST, "other"], prepare=setting(hosts__other={
        "endpoint": "ssh://deploy@other.example.com", "capacity": {"cpus": 8, "memory": "16GiB", "disk": "100GiB",
                                                             "gpus": [{"type": "nvidia-l4", "count": 2}]}}),
    ),
    Case("pools.*.replicas", 2, prepare=setting(templates__agent__ports__0__host_port=None)),
    Case("pools.*.replicas", 2, prepare=INGRESS, condition=URL_PORTS),
    Case("pools.*.replicas", 2, prepare=INGRESS_AND_RUNTIME, condition=URL_PORTS_AND_RUNTIME),
    Case("pools.*.replicas", 2, prepare=setting(hosts__local__runtime={"token": {"secret": "runtimeToken"}},
                                                templates__agent__ports__0__host_port=None),
         condition=RUNTIME_HOST),
    # A ceiling needs a runtime (which creates the sandboxes) and no secret in the environment (rule
    # ondemand-secret-env).
    Case("pools.*.max", 3, prepare=setting(hosts__local__runtime={"token": {"secret": "runtimeToken"}},
                                           templates__agent__ports__0__host_port=None,
                                           templates__agent__env__TOKEN=None, defaults__env__SHARED=None)),
    Case("pools.*.max", 3, prepare=setting(hosts__local__ingress={"domain": "sbx.example.com"},
                                           hosts__local__runtime={"token": {"secret": "runtimeToken"}},
                                           templates__agent__ports=URL_PORT, templates__agent__env__TOKEN=None,
                                           defaults__env__SHARED=None), condition=URL_PORTS),
    # Hibernated sessions counted apart: needs on-demand places that run (max above replicas, rule
    # hibernated-ceiling), so the base gets a ceiling of 3 first; the value adds 2 places past it.
    Case("pools.*.max_hibernated", 2, prepare=setting(hosts__local__runtime={"token": {"secret": "runtimeToken"}},
                                                      pools__agent__max=3,
                                                      templates__agent__ports__0__host_port=None,
                                                      templates__agent__env__TOKEN=None, defaults__env__SHARED=None)),
    Case("pools.*.max_hibernated", 2, prepare=setting(hosts__local__ingress={"domain": "sbx.example.com"},
                                                      hosts__local__runtime={"token": {"secret": "runtimeToken"}},
                                                      pools__agent__max=3, templates__agent__ports=URL_PORT,
                                                      templates__agent__env__TOKEN=None, defaults__env__SHARED=None),
         condition=URL_PORTS),
    Case("pools.*.description", "more agents"),
    # Size classes: the runtime applies them at claim (its configuration carries them); the guard holds the pool's
    # largest pids (agent's own: 64). A class of another disk needs on-demand places (rule size-disk).
    Case("pools.*.sizes", {"large": {"cpus": 4, "pids": 128}}, prepare=RUNTIME),
    Case("pools.*.sizes.*.cpus", at="pools.agent.sizes.large.cpus", value=8, prepare=setting(hosts__local__runtime={"token": {"secret": "runtimeToken"}},
                                                    pools__agent__sizes={"large": {"cpus": 4}})),
    Case("pools.*.sizes.*.memory", at="pools.agent.sizes.large.memory", value="4GiB", prepare=setting(hosts__local__runtime={"token": {"secret": "runtimeToken"}},
                                                          pools__agent__sizes={"large": {"memory": "2GiB"}})),
    Case("pools.*.sizes.*.disk", at="pools.agent.sizes.large.disk", value="2GiB", prepare=setting(hosts__local__runtime={"token": {"secret": "runtimeToken"}},
                                                        pools__agent__max=3, pools__agent__sizes={"large": {"disk": "1GiB"}},
                                                        templates__agent__ports__0__host_port=None,
                                                        templates__agent__env__TOKEN=None, defaults__env__SHARED=None)),
    Case("pools.*.sizes.*.pids", at="pools.agent.sizes.large.pids", value=256, prepare=setting(hosts__local__runtime={"token": {"secret": "runtimeToken"}},
                                                     pools__agent__sizes={"large": {"pids": 128}})),
    # --- policy (what `sandstack check` reports; no resource)
    Case("policy", {"production": True}),
    Case("policy.production", True),
    Case("policy.untrusted", True),
    Case("policy.ceilings", {"cpus": 8}),
    Case("policy.ceilings.cpus", 8),
    Case("policy.ceilings.memory", "8GiB"),
    Case("policy.ceilings.pids", 512),
    Case("policy.ceilings.max_lifetime", "12h"),
    Case("policy.ceilings.gpus", 2),
    Case("policy.capabilities", ["NET_BIND_SERVICE"]),
    Case("policy.public_ports", [8080]),
    Case("policy.registries", ["registry.example.com"]),
    Case("policy.writable_root", ["agent"]),
    Case("policy.private_egress", True),
    Case("policy.sudo", ["agent"]),
    Case("policy.suppressions", [{"rule": "SBX-PORT-001", "target": "template/agent", "reason": "reviewed"}]),
    Case("policy.suppressions[].rule", "SBX-NET-004", prepare=setting(policy={"suppressions": [
        {"rule": "SBX-PORT-001", "target": "template/agent", "reason": "reviewed"}]})),
    Case("policy.suppressions[].target", "pool/agent", prepare=setting(policy={"suppressions": [
        {"rule": "SBX-PORT-001", "target": "template/agent", "reason": "reviewed"}]})),
    Case("policy.suppressions[].reason", "reviewed again", prepare=setting(policy={"suppressions": [
        {"rule": "SBX-PORT-001", "target": "template/agent", "reason": "reviewed"}]})),
    Case("policy.severity", {"SBX-NET-004": "error"}),
]
CASE_IDS = [c.id for c in CASES]

# --- classification ------------------------------------------------------------------------------------

PROVIDER = f"sandstack-{HOST}-provider"
# Each host role's objects, by the part of their logical name after `sandstack-<host>-` (a pool's network, one per
# pool, apart): the roles' descriptors (sandstack.spec.roles).
ROLE_PARTS = {role.name: tuple(p.name for p in role.parts if not p.per_pool) for role in HOST_ROLES.values()}
ROLE_OBJECTS = {role: {f"sandstack-{HOST}-{part}" for part in parts} for role, parts in ROLE_PARTS.items()}
HOST_OBJECTS = set().union(*ROLE_OBJECTS.values())
POOL_NETWORK = re.compile(rf"^sandstack-{HOST}-net\.(?P<pool>[a-z0-9-]+)$")
SANDBOX = re.compile(rf"^sandstack-(?P<pool>[a-z0-9-]+)\.{HOST}-[0-9]+$")
SECRETS_OBJECT = re.compile(rf"^sandstack-(?P<pool>[a-z0-9-]+)\.{HOST}-secrets(-seeder)?$")
WORKSPACE_OBJECT = re.compile(rf"^sandstack-{HOST}-ws\.(?P<pool>[a-z0-9-]+)-[0-9]+-ws[0-9]+-[0-9]+m[xs]*$")
DATA_OBJECT = re.compile(rf"^sandstack-(?P<pool>[a-z0-9-]+)\.{HOST}-data([0-9]+|-seeder)$")
IMAGE = re.compile(rf"^sandstack-(?P<template>[a-z0-9-]+)\.{HOST}-image$")
ELSEWHERE = re.compile(rf"^sandstack-(?!{HOST}\b)[a-z0-9-]+$|^sandstack-[a-z0-9-]+\.(?!{HOST}-)")


def is_reload(name: str, host: str = HOST) -> bool:
    """Whether a host-level object is a host role's reload container (sandstack.plan.reload)."""
    prefix = f"sandstack-{host}-"
    return name.startswith(prefix) and any(p.config and p.resource == "container" and p.matches(name[len(prefix):])
                                           for role in HOST_ROLES.values() for p in role.parts)


# Each reload container of HOST → its service container (which it names, so it follows its renewal).
SERVICE_OF_RELOAD = {f"sandstack-{HOST}-{role.part('container', config=True).name}":
                     (f"sandstack-{HOST}-{role.container.name}",)
                     for role in HOST_ROLES.values() if role.reload == "in place" and role.container}


def role_of(name: str, host: str = HOST) -> str | None:
    """The host role of a host-level object of `host` (a pool's network belongs to 'networks'), else None."""
    prefix = f"sandstack-{host}-"
    if not name.startswith(prefix):
        return None
    part = name[len(prefix):]
    return next((role.name for role in HOST_ROLES.values() if any(p.matches(part) for p in role.parts)), None)


def _changes(before, after) -> dict[str, tuple[str, ...]]:
    """What the second run did, by "<kind> <logical name>" → changed inputs. The harness applies no provider
    (its id depends only on the URN), so a change of the provider's inputs is listed as its update."""
    out = {f"{a.kind} {a.name}": a.changed for a in after.actions if a.kind != "same"}
    old, new = (next(r.inputs for r in run.registrations.values() if r.name == PROVIDER) for run in (before, after))
    if old != new:
        out[f"update {PROVIDER}"] = tuple(sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k)))
    return out


def _names(result) -> set[str]:
    return {r.name for r in result.registrations.values()}


def _templates(data: dict, pools: tuple[str, ...]) -> set[str]:
    return {data["pools"][p]["template"] for p in pools if p in data["pools"]}


def expected_changes(effect: Effect, case: Case, runs, specs) -> tuple[set[str], list[str]]:
    """The changes `effect` promises for this case, and what it promises that must not be missing."""
    (before, after), (old_spec, new_spec) = runs, specs
    changes = _changes(before, after)
    names = _names(before) | _names(after)
    pools = tuple(old_spec["pools"]) if effect.scope == "host" else GPU_POOLS if effect.scope == "gpu" \
        else case.affected()
    sandboxes_before = {n for n in _names(before) if (m := SANDBOX.match(n)) and m["pool"] in pools}
    sandboxes_after = {n for n in _names(after) if (m := SANDBOX.match(n)) and m["pool"] in pools}
    expected: set[str] = set()
    required: list[str] = []

    action = {"update": "update", "replace": "replace"}.get(effect.sandboxes)
    if action:
        expected |= {f"{action} {s}" for s in sandboxes_before & sandboxes_after}
    if effect.sandboxes == "scale":
        expected |= {f"create {s}" for s in sandboxes_after - sandboxes_before}
        expected |= {f"delete {s}" for s in sandboxes_before - sandboxes_after}
    if effect.snapshot == "rebuild":
        for template in _templates(old_spec, pools):
            expected |= {f"replace sandstack-{template}.{HOST}-image", f"delete sandstack-{template}.{HOST}-image"}
            # A declared `push_to` pushes the rebuilt image again (RegistryImage): anew, for the first time, or
            # no more.
            push = f"sandstack-{template}.{HOST}-push"
            was, now = push in _names(before), push in _names(after)
            expected |= {f"replace {push}"} if was and now else {f"create {push}"} if now else \
                {f"delete {push}"} if was else set()
    if effect.snapshot == "switch":
        for template in _templates(old_spec, pools) | _templates(new_spec, pools):
            expected |= {f"create sandstack-{template}.{HOST}-image", f"delete sandstack-{template}.{HOST}-image"}
        expected &= set(changes)  # an image still used, or already there, stays
    if effect.secrets:
        found = {k for k in changes if (m := SECRETS_OBJECT.match(k.split(" ", 1)[1])) and m["pool"] in pools}
        expected |= found
        has_secrets = any((m := SECRETS_OBJECT.match(n)) and m["pool"] in pools for n in names)
        if has_secrets and not found:
            required.append("the pool's secrets objects")
    if effect.data:
        found = {k for k in changes if (m := DATA_OBJECT.match(k.split(" ", 1)[1])) and m["pool"] in pools}
        expected |= found
        if any((m := DATA_OBJECT.match(n)) and m["pool"] in pools for n in names) and not found:
            required.append("the pool's data objects")
    if effect.workspaces:
        found = {k for k in changes if (m := WORKSPACE_OBJECT.match(k.split(" ", 1)[1])) and m["pool"] in pools}
        expected |= found
        if any((m := WORKSPACE_OBJECT.match(n)) and m["pool"] in pools for n in names) and not found:
            required.append("the pool's disk workspaces")

    def placed(spec: dict) -> set[str]:
        return {h for p in pools for h in spec["pools"].get(p, {}).get("hosts", ())}

    # The hosts the declared roles are about: this one, or for placement the hosts the pool is added to or taken off
    # (nothing changes on this host), where the pool's own objects (sandboxes, image, seeders) are expected too.
    hosts = sorted(placed(old_spec) ^ placed(new_spec)) if effect.scope == "placement" else [HOST]
    if effect.scope == "placement":
        expected |= {k for k in changes if ELSEWHERE.search(name := k.split(" ", 1)[1])
                     and not any(role_of(name, host) for host in hosts)}
    # The declared host roles: each one the host has (an object of the role before or after) changes, and no
    # other host object does. A role that takes its configuration in place changes only its reload container, unless
    # the change creates or deletes the role itself.
    for host in hosts:
        for role in sorted(effect.host):
            found = {k for k in changes if role_of(k.split(" ", 1)[1], host) == role}
            service = f"sandstack-{host}-{HOST_ROLES[role].container.name}" if HOST_ROLES[role].container else None
            if role in effect.reloads and service in _names(before) and service in _names(after):
                found = {k for k in found if is_reload(k.split(" ", 1)[1], host)}
            expected |= found
            if not found and any(role_of(n, host) == role for n in names):
                required.append(f"the {role} of host {host!r}")
    # Consequences of renewed host objects: everything on a replaced provider, the sandboxes of a replaced pool
    # network, a seeder re-run on a new infra image, and the old object of a create-before-delete replace.
    moved = {m["pool"] for k in changes if k.startswith("replace ") and (m := POOL_NETWORK.match(k[8:]))}
    for key, fields in changes.items():
        name = key.split(" ", 1)[1]
        sandbox = SANDBOX.match(name)
        if "<provider>" in fields and f"update {PROVIDER}" in expected:
            expected.add(key)
        if sandbox and sandbox["pool"] in moved and key.startswith("replace ") and f"replace sandstack-{HOST}-net.{sandbox['pool']}" in expected:
            expected.add(key)
        # The change table's cascades (Pulumi's dependent rule): a pool network replaced delete-before-replace
        # replaces the host containers that join it by name, whatever the field's declaration names.
        # (The gateway refers to the networks its reload container joins it to by a label that depends on them.)
        if moved and fields in (("networksAdvanced",), ("labels",)) and role_of(name, HOST) in table.cascaded({"networks"}) \
                and any(f"replace sandstack-{HOST}-net.{pool}" in expected for pool in moved):
            expected.add(key)
        seeder = SECRETS_OBJECT.match(name) or DATA_OBJECT.match(name)
        if seeder and fields == ("image",) and f"replace sandstack-{HOST}-infra" in expected:
            expected.add(key)

    # The runtime's recipe of a pool's on-demand places (sandstack.spec.changes.in_recipe): a change to the pool's
    # sandboxes changes the places not made yet alike, so the runtime takes its configuration again.
    def ondemand(spec: dict) -> bool:
        return any((pool := spec["pools"].get(p)) and (pool.get("max") or 0) > pool.get("replicas", 1) for p in pools)
    if table.in_recipe(effect) and (ondemand(old_spec) or ondemand(new_spec)):
        recipe = {k for k in changes if role_of(n := k.split(" ", 1)[1], HOST) == "runtime" and is_reload(n, HOST)}
        expected |= recipe
        if not recipe:
            required.append("the runtime's reload (its recipe of the pool's on-demand places)")
    # A renewed host service's reload container runs again for the new service (it names it: `After`).
    for key in changes:
        name = key.split(" ", 1)[1]
        if key.startswith("replace ") and any(f"replace {service}" in expected
                                              for service in SERVICE_OF_RELOAD.get(name, ())):
            expected.add(key)
    for key in list(changes):
        if key.startswith("delete ") and f"replace {key[7:]}" in expected:
            expected.add(key)
    return expected, required


def expected_problems(effect: Effect, case: Case, runs, specs) -> list[str]:
    """How the second run differs from what `effect` promises (empty: it keeps the promise)."""
    changes = _changes(*runs)
    expected, required = expected_changes(effect, case, runs, specs)
    unexpected = {k: changes[k] for k in sorted(set(changes) - expected)}
    missing = sorted(expected - set(changes)) + [f"({what})" for what in required]
    if not unexpected and not missing:
        return []
    return [f"declared {effect.label!r}: unexpected {unexpected}, missing {missing}"]


# --- the tests -----------------------------------------------------------------------------------------


def test_every_model_field_has_a_case():
    covered = {c.path for c in CASES} | set(EXEMPT)
    assert len(set(CASE_IDS)) == len(CASES), "case ids are unique"
    assert not {c.path for c in CASES} & set(EXEMPT), "an exempt field has a case"
    assert sorted(set(DECLARED) - covered) == [], "add a change-matrix case for each new field"
    assert sorted(covered - set(DECLARED)) == [], "a case or exemption names no model field"
    conditions = {(path, cond) for path, effect in DECLARED.items() for cond, _ in effect.when}
    cased = {(c.path, c.condition) for c in CASES}
    assert sorted(conditions - cased - set(NO_SUCH_CASE)) == [], "add a case for each condition a declaration names"
    assert set(NO_SUCH_CASE) <= conditions - cased, "NO_SUCH_CASE names a condition that is not declared there, or cased"
    assert sorted(c for c in cased if c[1] and c not in conditions) == [], "a case names an undeclared condition"


def test_the_base_stack_is_rich_enough_and_stable(apply):
    first = apply(BASE)
    names = {a.name for a in first.actions}
    assert HOST_OBJECTS - {PROVIDER} - ROLE_OBJECTS["ingress"] - ROLE_OBJECTS["runtime"] - ROLE_OBJECTS["logger"] <= names and {f"sandstack-{p}.{HOST}-0" for p in ("agent", "free")} <= names
    assert {f"sandstack-agent.{HOST}-secrets", f"sandstack-agent.{HOST}-secrets-seeder"} <= names
    assert _changes(first, apply(BASE)) == {}


def _params():
    from tests.changes import runs  # the cases' runs, shared with the diff's and the differential's tests

    return runs.params(xfail=True)


@pytest.mark.parametrize("case", _params())
def test_a_field_change_does_what_its_declaration_says(case: Case):
    from tests.changes.runs import case_runs

    runs = case_runs(case)
    problems = expected_problems(case.effect(), case, (runs.base.run, runs.after.run), (runs.base.spec, runs.after.spec))
    assert not problems, f"{case.path} ({case.spec_path()} → {case.value!r}): {problems[0]}"


@pytest.fixture
def apply(up):
    """`apply(spec_dict)` → RunResult: one `pulumi up` of the spec, with the matrix's files and secrets."""
    return lambda data: up(data, FILES, SECRETS)

