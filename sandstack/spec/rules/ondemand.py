"""A pool's ceilings (`max`, `max_hibernated`): sandboxes the runtime creates on demand (docs/design/ondemand.md)."""

from __future__ import annotations

from typing import Iterator

from sandstack.spec.errors import Diagnostic
from sandstack.spec.models import SecretRef
from sandstack.spec.rules.context import Context, rule


@rule("ondemand-ceiling")
def ceiling_at_least_warm(ctx: Context) -> Iterator[Diagnostic]:
    for name, pool in ctx.stack.pools.items():
        if pool.max is not None and pool.max < pool.replicas:
            yield ctx.error(("pools", name, "max"), f"max {pool.max} is below replicas {pool.replicas}: the ceiling "
                            "counts the warm sandboxes too; give at least replicas, or leave max out", "ondemand-ceiling")


@rule("ondemand-runtime")
def ondemand_needs_runtime(ctx: Context) -> Iterator[Diagnostic]:
    """Only the runtime creates a sandbox on demand: every host of a pool with a ceiling above its warm count runs
    one."""
    for name, pool in ctx.stack.pools.items():
        if pool.places <= pool.replicas:
            continue
        for i, host in enumerate(pool.hosts):
            spec = ctx.stack.hosts.get(host)
            if spec is not None and spec.runtime is None:
                grows = (f"may grow to max {pool.max} on demand" if pool.ceiling > pool.replicas else
                         f"has {pool.max_hibernated} on-demand places for hibernated sessions (max_hibernated)")
                yield ctx.error(("pools", name, "hosts", i), f"pool {name!r} {grows}, "
                                f"but host {host!r} declares no runtime (`hosts.{host}.runtime`), which creates them",
                                "ondemand-runtime")


@rule("ondemand-secret-env")
def ondemand_without_secret_env(ctx: Context) -> Iterator[Diagnostic]:
    """The runtime creates an on-demand sandbox from its configuration, which is not a secret store: a secret in a
    template's environment would be written there in clear. Secret files (`secrets`) are mounted from the pool's
    volume and need nothing of it."""
    for name, pool in ctx.stack.pools.items():
        template = ctx.stack.templates.get(pool.template)
        if pool.places <= pool.replicas or template is None:
            continue
        env = {**ctx.stack.defaults.env, **template.env}
        for key, value in env.items():
            if isinstance(value, SecretRef):
                where = ("templates", pool.template, "env", key) if key in template.env else ("defaults", "env", key)
                yield ctx.error(where, f"env {key!r} of template {pool.template!r} is a secret, and pool {name!r} "
                                "creates sandboxes on demand (max above replicas), whose settings the runtime keeps in "
                                "clear; give it as a secret file (`secrets`) instead", "ondemand-secret-env")


@rule("hibernated-ceiling")
def hibernated_ceiling(ctx: Context) -> Iterator[Diagnostic]:
    """`max_hibernated` counts the on-demand places hibernated: it needs on-demand places that run (`max` above
    `replicas`), and 0 refuses every hibernation of one, which an idle policy that hibernates would meet at each
    pass."""
    for name, pool in ctx.stack.pools.items():
        if pool.max_hibernated is None:
            continue
        where = ("pools", name, "max_hibernated")
        if pool.ceiling <= pool.replicas:
            yield ctx.error(where, f"max_hibernated {pool.max_hibernated} counts sessions hibernated in on-demand "
                            f"places, but pool {name!r} runs none (max {pool.ceiling} is its replicas): raise max "
                            "above replicas, or leave max_hibernated out", "hibernated-ceiling")
            continue
        template = ctx.stack.templates.get(pool.template)
        session = (template.session or ctx.stack.defaults.session) if template is not None else None
        if pool.max_hibernated == 0 and session is not None and session.idle == "hibernate":
            yield ctx.error(where, f"max_hibernated 0 refuses every hibernation of an on-demand sandbox, but "
                            f"template {pool.template!r} hibernates its idle sessions (`session.idle: hibernate`): "
                            "give at least 1, or leave max_hibernated out", "hibernated-ceiling")


RULES = (ceiling_at_least_warm, ondemand_needs_runtime, ondemand_without_secret_env, hibernated_ceiling)
