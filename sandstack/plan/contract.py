"""What sandboxes and the host guard agree on, defined once: paths and cgroup names both sides use.

Pure (no Pulumi), so plans and tests import it freely; the guard gets these as its mounts and env.
"""

from __future__ import annotations

STATE_MOUNT = "/run/sandstack/guard"  # where sandboxes see the guard's state, read-only
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
