"""Deterministic names and labels for everything sandstack creates on a Docker host.

Names derive only from the stack, host, pool and template names, so a re-run names every object
the same and nothing is replaced by accident; two stacks can share a host without clashing.
"""

from __future__ import annotations

import hashlib
from typing import Mapping

from sandstack.plan.contract import LABEL_MANAGED_BY, LABEL_STACK, label_key

PREFIX = "sandstack"


def docker_name(stack: str, *parts: str) -> str:
    """`sandstack-dev-python-0`: a Docker object name, unique per stack on a host."""
    return "-".join((PREFIX, stack, *parts))


def infra_name(stack: str, role: str) -> str:
    """`sandstack-dev_gateway`: a host-level object of a stack. The '_' cannot appear in spec names, so no
    pool or template name can ever produce the same Docker name."""
    return f"{PREFIX}-{stack}_{role}"


def egress_network_name(stack: str) -> str:
    """`sandstack-dev-_egress`: the gateway's way out. Docker routes a container on several networks through
    the routed one whose *name* sorts first (measured on 20.10; the gateway's `gw_priority` does it on API
    1.48+), so this name must sort before every pool network `sandstack-<stack>-<pool>`: pool names start
    with a letter and '_' sorts before every letter. A pool that publishes ports has a routed network too,
    and a default route through it would be dropped by the guard (docs/design/engine-findings.md)."""
    return f"{PREFIX}-{stack}-_egress"


def bridge_name(stack: str, *parts: str) -> str:
    """A Linux bridge name for a sandstack network: at most 15 characters (IFNAMSIZ - 1), so hashed."""
    digest = hashlib.sha256("/".join((stack, *parts)).encode()).hexdigest()
    return f"ss-{digest[:12]}"


def labels(
    stack: str, extra: Mapping[str, str] | None = None, **fields: str
) -> dict[str, str]:
    """`sandstack.stack`, `sandstack.<field>` and the host's own labels, as one mapping."""
    out = {LABEL_STACK: stack, LABEL_MANAGED_BY: "pulumi"}
    out.update({label_key(k): v for k, v in fields.items()})
    for key, value in (extra or {}).items():
        out.setdefault(key, value)
    return dict(sorted(out.items()))
