"""Where a template's declared platform can run: only on hosts that offer it (docs/design/platforms.md)."""

from __future__ import annotations

from typing import Iterator

from sandstack.spec.errors import Diagnostic
from sandstack.spec.models.base import one_of
from sandstack.spec.rules.context import Context, rule


@rule("platform")
def platforms_offered(ctx: Context) -> Iterator[Diagnostic]:
    """A pool places its template's platform on each of its hosts: a host that does not offer it would build an image
    it cannot run, so it is refused before anything is made."""
    for name, host in ctx.stack.hosts.items():
        for i, platform in enumerate(host.platforms):
            if platform in host.platforms[:i]:
                yield ctx.error(("hosts", name, "platforms", i), f"{platform!r} is listed twice", "platform")
    for pool_name, pool in ctx.stack.pools.items():
        template = ctx.stack.templates.get(pool.template)
        if template is None:
            continue  # rule ref-template
        platform = template.platform or ctx.stack.defaults.platform
        if platform is None:
            continue
        offering = [name for name, host in ctx.stack.hosts.items() if platform in host.platforms]
        for i, host in enumerate(pool.hosts):
            spec = ctx.stack.hosts.get(host)
            if spec is None or platform in spec.platforms:
                continue  # an unknown host: rule ref-host
            declare = f"add it to `hosts.{host}.platforms` if that host runs it (natively or under emulation)"
            fix = (f"hosts offering it: {one_of(*offering)}: place the pool on them, or {declare}" if offering else
                   f"no host of the stack offers it: {declare}, or build the template for {one_of(*spec.platforms)}")
            yield ctx.error(("pools", pool_name, "hosts", i),
                            f"pool {pool_name!r} places template {pool.template!r} (platform {platform!r}) on host "
                            f"{host!r}, which offers {one_of(*spec.platforms)} only; {fix}", "platform")


# This module's rules, in the order they run (the registry, sandstack.spec.rules.RULES, lists each module).
RULES = (platforms_offered,)
