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
