"""A pool's ceiling (`max`): sandboxes the runtime creates on demand (docs/design/ondemand.md)."""

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
        if pool.ceiling <= pool.replicas:
            continue
        for i, host in enumerate(pool.hosts):
            spec = ctx.stack.hosts.get(host)
            if spec is not None and spec.runtime is None:
                yield ctx.error(("pools", name, "hosts", i), f"pool {name!r} may grow to max {pool.max} on demand, "
                                f"but host {host!r} declares no runtime (`hosts.{host}.runtime`), which creates them",
                                "ondemand-runtime")


@rule("ondemand-secret-env")
def ondemand_without_secret_env(ctx: Context) -> Iterator[Diagnostic]:
    """The runtime creates an on-demand sandbox from its configuration, which is not a secret store: a secret in a
    template's environment would be written there in clear. Secret files (`secrets`) are mounted from the pool's
    volume and need nothing of it."""
    for name, pool in ctx.stack.pools.items():
        template = ctx.stack.templates.get(pool.template)
        if pool.ceiling <= pool.replicas or template is None:
            continue
        env = {**ctx.stack.defaults.env, **template.env}
        for key, value in env.items():
            if isinstance(value, SecretRef):
                where = ("templates", pool.template, "env", key) if key in template.env else ("defaults", "env", key)
                yield ctx.error(where, f"env {key!r} of template {pool.template!r} is a secret, and pool {name!r} "
                                "creates sandboxes on demand (max above replicas), whose settings the runtime keeps in "
                                "clear; give it as a secret file (`secrets`) instead", "ondemand-secret-env")


RULES = (ceiling_at_least_warm, ondemand_needs_runtime, ondemand_without_secret_env)
