"""What the declared change table means for the containers the components register.

pulumi-docker shows a change of some container inputs as an update but never applies it to the running
container (terraform-provider-docker keeps them in its state only: `healthcheck`, `tmpfs`, `init`, the
`wait*` settings and `destroy_grace_seconds`; docs/design/change-table.md). A container whose value of one
of them changes must therefore be replaced, or a diff would promise what the host does not do.

For sandboxes these inputs come from spec fields whose declaration (`Effect.forces`,
sandstack.spec.changes) says they replace the sandboxes, plus settings of the plan itself; the union
is every sandbox's `replace_on_changes`. The host's own containers (guard, gateway, secrets seeder)
take no spec field through such an input, so theirs is the plan's list.
"""

from __future__ import annotations

from functools import cache

from pydantic import BaseModel

from sandstack.spec.changes import Effect
from sandstack.spec.models import Stack
from sandstack.spec.models.base import change_of
from sandstack.spec.walk import model_fields

# Inputs the provider keeps in state only, which the plan sets itself (not from a spec field).
PLAN_SETTINGS_NEVER_APPLIED = ("init", "wait", "wait_timeout", "destroy_grace_seconds")
# Sandbox settings (sandstack.plan.sandbox.SandboxPlan) whose inputs the provider updates on the running
# container (terraform-provider-docker's container update: memory and swap, restart policy and retries);
# a change of any other setting replaces the container.
UPDATED_IN_PLACE = frozenset({"memory_mb", "restart", "max_retry_count"})
# Every input of that kind the components set on any container.
NEVER_APPLIED = ("destroy_grace_seconds", "healthcheck", "init", "tmpfs", "wait", "wait_timeout")


def _all_effects(effect: Effect):
    yield effect
    for _, under in effect.when:
        yield from _all_effects(under)


@cache
def declared_forces(model: type[BaseModel] = Stack) -> tuple[str, ...]:
    """The container inputs that declared fields force a replace through (their `Effect.forces`)."""
    forced = {name for info in model_fields(model).values() for e in _all_effects(change_of(info))
              for name in e.forces}
    unknown = forced - set(NEVER_APPLIED)
    if unknown:
        raise ValueError(f"a field forces {sorted(unknown)}, which the provider applies without a replace")
    return tuple(sorted(forced))


def sandbox_replace_on_changes() -> list[str]:
    """`replace_on_changes` of every sandbox container: what the declared fields force, then the plan's own."""
    return list(declared_forces()) + [s for s in PLAN_SETTINGS_NEVER_APPLIED if s not in declared_forces()]


def host_container_replace_on_changes() -> list[str]:
    """`replace_on_changes` of the guard, gateway and seeder containers."""
    return list(NEVER_APPLIED)
