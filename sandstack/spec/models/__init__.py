"""The spec's pydantic models: the one source of truth for the schema and the reference."""

from sandstack.spec.models.base import SecretRef
from sandstack.spec.models.hosts import Capacity, GpuInventory, Host, Overcommit, TlsMaterial
from sandstack.spec.models.limits import BUILTIN_LIMITS, GpuRequest, Lifecycle, Limits, LimitsOverride
from sandstack.spec.models.network import EGRESS_MODES, NetworkPolicy, NetworkProfiles, Port
from sandstack.spec.models.policy import Ceilings, Policy, Suppression
from sandstack.spec.models.stack import Pool, Stack
from sandstack.spec.models.templates import (
    Filesystem,
    Readiness,
    SecretFile,
    Security,
    SessionPolicy,
    Snapshot,
    SnapshotFile,
    Template,
    TemplateDefaults,
    WritablePath,
)

__all__ = [
    "BUILTIN_LIMITS", "EGRESS_MODES", "Capacity", "Ceilings", "Policy", "Suppression", "Filesystem", "GpuInventory", "GpuRequest", "Host", "Lifecycle",
    "Limits", "LimitsOverride", "NetworkPolicy", "Overcommit", "Pool", "Port", "Readiness", "SecretFile",
    "SecretRef", "Security", "SessionPolicy", "Snapshot", "SnapshotFile", "Stack", "Template", "TemplateDefaults", "TlsMaterial",
    "WritablePath",
]
