"""The host/sandbox contract, for the plan: defined once in `sandstack.spec.contract` (a leaf module the spec's
rules import too) and re-exported here, so plans and components keep importing it from the plan layer."""

from __future__ import annotations

from sandstack.spec.contract import (
    CGROUP_ROOT_NAME,
    CONFIG_DIR,
    CONFIG_HAVE,
    CONFIG_PROFILES,
    PROFILE_HELPER,
    CONFIG_REFUSED,
    CONFIG_SETS,
    CONFIG_STATUS,
    CONFIG_WANT,
    CRASH_RETRIES,
    EXIT_IDLE,
    EXIT_LIFETIME,
    GUARD_CGROUP_MOUNT,
    GUARD_STATE_DIR,
    GUARD_WORKSPACES_MOUNT,
    HOST_CGROUP_MOUNT,
    IDLE_CPU_MS_PER_S,
    LABEL_DIGEST,
    LABEL_HOST,
    LABEL_MANAGED_BY,
    LABEL_POOL,
    LABEL_PREFIX,
    LABEL_REPLICA,
    LABEL_ROLE,
    LABEL_STACK,
    LABEL_SUBNET,
    LABEL_TEMPLATE,
    LABEL_VERSION,
    RUN_DIR,
    SECRETS_DIR,
    SESSION_SECRETS_DIR,
    STATE_MOUNT,
    WORKSPACES_HOST_DIR,
    cgroup_parent,
    label_key,
    workspace_dir,
)

__all__ = [
    "CGROUP_ROOT_NAME", "CONFIG_DIR", "CONFIG_HAVE", "CONFIG_PROFILES", "PROFILE_HELPER", "CONFIG_REFUSED", "CONFIG_SETS", "CONFIG_STATUS", "CONFIG_WANT",
    "CRASH_RETRIES", "EXIT_IDLE", "EXIT_LIFETIME", "GUARD_CGROUP_MOUNT", "GUARD_STATE_DIR",
    "GUARD_WORKSPACES_MOUNT", "HOST_CGROUP_MOUNT", "IDLE_CPU_MS_PER_S", "LABEL_DIGEST", "LABEL_HOST",
    "LABEL_MANAGED_BY", "LABEL_POOL", "LABEL_PREFIX", "LABEL_REPLICA", "LABEL_ROLE", "LABEL_STACK", "LABEL_SUBNET",
    "LABEL_TEMPLATE", "LABEL_VERSION", "RUN_DIR", "SECRETS_DIR", "SESSION_SECRETS_DIR", "STATE_MOUNT", "WORKSPACES_HOST_DIR",
    "cgroup_parent", "label_key", "workspace_dir",
]
