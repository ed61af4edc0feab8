"""References between entries (pools → templates and hosts, limits → profiles) and a host's endpoint against its transport."""

from __future__ import annotations

from typing import Iterator

from sandstack.spec.errors import Diagnostic
from sandstack.spec.rules.context import Context, rule, templates


@rule("ref-template")
def pool_template_exists(ctx: Context) -> Iterator[Diagnostic]:
    known = ", ".join(ctx.stack.templates)
    for name, pool in ctx.stack.pools.items():
        if pool.template not in ctx.stack.templates:
            yield ctx.error(("pools", name, "template"), f"template {pool.template!r} is not defined; templates: {known}",
                            "ref-template")


@rule("ref-host")
def pool_hosts_exist(ctx: Context) -> Iterator[Diagnostic]:
    known = ", ".join(ctx.stack.hosts)
    for name, pool in ctx.stack.pools.items():
        seen: set[str] = set()
        for i, host in enumerate(pool.hosts):
            if host not in ctx.stack.hosts:
                yield ctx.error(("pools", name, "hosts", i), f"host {host!r} is not defined; hosts: {known}", "ref-host")
            elif host in seen:
                yield ctx.error(("pools", name, "hosts", i), f"host {host!r} is listed twice", "ref-host")
            seen.add(host)


@rule("ref-profile")
def limits_profiles_exist(ctx: Context) -> Iterator[Diagnostic]:
    known = ", ".join(ctx.stack.profiles) or "none defined"
    owners = [(("defaults",), ctx.stack.defaults.limits)] + [(p, t.limits) for p, t in templates(ctx)]
    for path, limits in owners:
        name, where = (limits, path + ("limits",)) if isinstance(limits, str) else (
            getattr(limits, "profile", None), path + ("limits", "profile"))
        if name is not None and name not in ctx.stack.profiles:
            yield ctx.error(where, f"profile {name!r} is not defined; profiles: {known}", "ref-profile")


@rule("host-endpoint")
def host_endpoint_matches_transport(ctx: Context) -> Iterator[Diagnostic]:
    for name, host in ctx.stack.hosts.items():
        scheme = host.endpoint.split("://", 1)[0]
        if scheme == "tcp" and host.tls is None:
            yield ctx.error(("hosts", name, "endpoint"),
                            f"{host.endpoint!r} needs `tls` (ca, cert, key): a Docker daemon on plain tcp is open "
                            "to anyone who can reach it", "host-endpoint")
        if scheme != "tcp" and host.tls is not None:
            yield ctx.error(("hosts", name, "tls"), f"`tls` applies only to tcp:// endpoints, not {scheme}://",
                            "host-endpoint", key=True)
        if scheme != "ssh" and host.ssh_opts:
            yield ctx.error(("hosts", name, "ssh_opts"), f"`ssh_opts` applies only to ssh:// endpoints, not {scheme}://",
                            "host-endpoint", key=True)


# This module's rules, in the order they run (the registry, sandstack.spec.rules.RULES, lists each module).
RULES = (pool_template_exists, pool_hosts_exist, limits_profiles_exist, host_endpoint_matches_transport,)
