"""What sandboxes, the host guard and sandstack's other containers agree on, defined once: paths, the cgroup
subtree, the lifecycle's exit statuses and the label keys.

A leaf module (it imports nothing), so the spec's models and rules, the plan and the components all import it;
`sandstack.plan.contract` re-exports it for the plan. The shell assets repeat none of it: they get these
values as arguments or environment from the plan. A test (tests/spec/test_contract.py) fails when one of these
literals is typed out in Python anywhere else.
"""

from __future__ import annotations

# --- Paths inside the sandboxes -------------------------------------------------------------------------------
SECRETS_DIR = "/run/secrets"  # secret files, on a read-only mount; every `secrets[].path` is under it
# A claim's run-scoped secret files (sandstack.runtime.secret_files): a tmpfs of every sandbox, filled by the runtime
# at claim and gone with the container's next start (every release restarts or removes it). Never a spec's path.
SESSION_SECRETS_DIR = f"{SECRETS_DIR}/session"
# sandstack's own directory in the containers it starts (the guard's state in sandboxes, the runtime's code,
# the ingress proxy's certificates): reserved, a template's writable paths may not cover it.
RUN_DIR = "/run/sandstack"
STATE_MOUNT = f"{RUN_DIR}/guard"  # where sandboxes see the guard's state, read-only

# --- A host service's configuration, apart from its container (docs/design/live-changes.md) ----------------------
# Its configuration volume, where its reload container and the service itself see it. The reload container writes
# each configuration as `sets/<digest>/<NAME>` (a file per item) and points `want` at it (a symlink, swapped at once);
# the service applies what `want` names and writes the digest in force to `status/have`, or `<digest> <why>` to
# `status/refused` when it refuses one (keeping the one in force).
CONFIG_DIR = f"{RUN_DIR}/config"
CONFIG_WANT = "want"
CONFIG_SETS = "sets"
CONFIG_STATUS = "status"
CONFIG_HAVE = f"{CONFIG_STATUS}/have"
CONFIG_REFUSED = f"{CONFIG_STATUS}/refused"
# In the gateway's configuration volume: one file per sandbox address not in its pool's start network profile,
# holding `<pool> <profile>`, written by the runtime (through the gateway container) and read by the gateway's
# profile helper at every request (docs/design/network-profiles.md).
CONFIG_PROFILES = "profiles"
# The gateway's helper that answers squid's external acl from those files (written by its entrypoint).
PROFILE_HELPER = "/tmp/sandstack-profile"
# In the runtime's configuration volume: the unix socket where the runtime serves the host's ingress too (to wake a
# site's sandbox, to check a visitor's session token). The ingress mounts that volume read-only at
# INGRESS_RUNTIME_DIR: a socket is reached by a file, so an ingress added to a host changes none of the runtime's
# inputs (docs/design/live-changes.md) and the runtime listens on no address of the ingress's network.
WAKE_SOCKET = "wake.sock"
INGRESS_RUNTIME_DIR = f"{RUN_DIR}/runtime"

# --- cgroups --------------------------------------------------------------------------------------------------
HOST_CGROUP_MOUNT = "/sys/fs/cgroup"  # the host's cgroup tree, bind-mounted into the guard
CGROUP_ROOT_NAME = "sandstack"  # the guard's cgroup subtree, under every controller


def cgroup_parent(container_name: str) -> str:
    """A sandbox's (or the gateway's) cgroup parent, whose pids.max the guard writes."""
    return f"/{CGROUP_ROOT_NAME}/{container_name}"


# Inside the guard's container: the host's cgroup tree and the state volume sandboxes read.
GUARD_CGROUP_MOUNT = "/host-cgroup"
GUARD_STATE_DIR = "/state"

# Disk workspaces (docs/design/workspaces.md): each is a Docker volume mounted from a loop device whose
# filesystem image (`<volume>.img`) and device link (`<volume>.dev`) the guard keeps in the stack's directory.
WORKSPACES_HOST_DIR = "/var/lib/sandstack/workspaces"  # on the host; one directory per stack
GUARD_WORKSPACES_MOUNT = "/workspaces"  # the stack's directory, inside the guard's container


def workspace_dir(stack: str) -> str:
    return f"{WORKSPACES_HOST_DIR}/{stack}"


# --- Lifecycle ------------------------------------------------------------------------------------------------
# What the host guard and the sandbox container implement; the spec's field descriptions quote these numbers,
# so the reference and the enforcement cannot drift apart.
EXIT_LIFETIME = 124  # exit status of a sandbox stopped for good at `max_lifetime` (on_expiry 'stop')
EXIT_IDLE = 123  # exit status of a sandbox stopped for good at `idle_timeout` (on_expiry 'stop')
CRASH_RETRIES = 3  # on_expiry 'stop': a crashed sandbox is restarted at most this often (Docker's on-failure:3)
IDLE_CPU_MS_PER_S = 20  # below this much CPU time per second (readiness probes excluded) a sandbox is idle

# --- The runtime's SSH endpoint (docs/design/ssh.md) -------------------------------------------------------------
SSH_PER_SOURCE = 16  # default most open SSH connections from one source address (`runtime.ssh`'s bound)

# --- Labels on every Docker object sandstack creates ----------------------------------------------------------
LABEL_PREFIX = "sandstack."
LABEL_STACK = f"{LABEL_PREFIX}stack"  # the stack's name
LABEL_MANAGED_BY = f"{LABEL_PREFIX}managed-by"  # always 'pulumi'
LABEL_ROLE = f"{LABEL_PREFIX}role"  # what the object is: sandbox, guard, gateway, logger, ingress, runtime, …
LABEL_HOST = f"{LABEL_PREFIX}host"  # the spec's host name
LABEL_POOL = f"{LABEL_PREFIX}pool"  # a pool's objects: its sandboxes and network
LABEL_TEMPLATE = f"{LABEL_PREFIX}template"  # a sandbox's (and its snapshot image's) template
LABEL_VERSION = f"{LABEL_PREFIX}version"  # the template's snapshot version
LABEL_DIGEST = f"{LABEL_PREFIX}digest"  # the snapshot build context's digest
LABEL_REPLICA = f"{LABEL_PREFIX}replica"  # a sandbox's index in its pool
LABEL_SUBNET = f"{LABEL_PREFIX}subnet"  # a sandbox's pool subnet (a new subnet moves the sandbox)


def label_key(field: str) -> str:
    """`sandstack.<field>`, with '_' written '-' (`managed_by` → `sandstack.managed-by`)."""
    return f"{LABEL_PREFIX}{field.replace('_', '-')}"

# `urls.auth: session` (the ingress asks the runtime before each request; sandstack.runtime.routes.url_auth): where a
# visitor's session token travels, apart from the app's own Authorization header.
URL_AUTH_COOKIE = "sandstack_session"  # the cookie a browser keeps it in, for that site only
URL_AUTH_QUERY = "sandstack_token"  # a first visit's token in the URL, swapped for the cookie at once
URL_AUTH_HEADER = "X-Sandstack-Token"  # a program's

# --- The snapshot store (docs/design/snapshot-store.md) -----------------------------------------------------------
# A registry's address: http(s), a host name or IPv4 address, an optional port, no path (the API is under /v2/).
REGISTRY_URL_PATTERN = r"^https?://[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?(:[0-9]{1,5})?$"
# The repository each pool's snapshots go under (`<repository>/<pool>`): the distribution spec's path grammar, lower
# case, one to three components.
REPOSITORY_PATTERN = r"^[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*){0,2}$"
# Where plain http may carry the store's password and the snapshots: this machine only.
LOOPBACK_REGISTRY_HOSTS = ("127.0.0.1", "localhost")
