"""Rules for URLs (`exposure: url` ports and `hosts.*.ingress`)."""

from __future__ import annotations

from typing import Iterator

from sandstack.spec.envrefs import PUBLIC_HOSTNAME, references, variables
from sandstack.spec.errors import Diagnostic, JsonPath
from sandstack.spec.models import Template
from sandstack.spec.rules.context import Context, placements, rule, templates, written


@rule("url-port")
def url_ports_are_routable(ctx: Context) -> Iterator[Diagnostic]:
    """The ingress proxies HTTP(S) over TCP, and a url port is never published on the host."""
    for path, template in templates(ctx):
        for i, port in enumerate(template.ports):
            if port.exposure != "url":
                continue
            where = path + ("ports", i)
            if port.protocol != "tcp":
                yield ctx.error(where + ("protocol",), f"port {port.port} has `exposure: url`, which the ingress "
                                "serves over HTTPS: it must be tcp", "url-port")
            if port.host_port is not None:
                yield ctx.error(where + ("host_port",), f"port {port.port} has `exposure: url`, which publishes "
                                "nothing on the host: remove `host_port`, or use exposure 'host' or 'public'",
                                "url-port")


@rule("url-ingress")
def url_ports_have_an_ingress(ctx: Context) -> Iterator[Diagnostic]:
    """A url port needs the ingress of every host its pool runs on; an ingress has one source of certificates."""
    for pool, template_name, host, _ in placements(ctx):
        ports = [p.port for p in ctx.stack.templates[template_name].ports if p.exposure == "url"]
        if ports and ctx.stack.hosts[host].ingress is None:
            listed = ", ".join(map(str, ports))
            yield ctx.error(("pools", pool, "hosts"), f"pool {pool!r} has url ports ({listed}, template "
                            f"{template_name!r}) but host {host!r} declares no `ingress`: declare "
                            f"`hosts.{host}.ingress` with its domain, or use exposure 'host' or 'public'",
                            "url-ingress")
    for host, spec in ctx.stack.hosts.items():
        if spec.ingress and spec.ingress.tls and spec.ingress.acme_email:
            yield ctx.error(("hosts", host, "ingress", "acme_email"), "an ingress gets its certificate either from "
                            "`tls` (secrets) or from ACME (`acme_email`), not both: remove one", "url-ingress")


def _env_refs(ctx: Context, name: str, template: Template) -> Iterator[tuple[JsonPath, str, str]]:
    """(where it is written, variable, reference) for each `${SANDSTACK_…}` in the environment the template's sandboxes
    get: the defaults' merged under its own (and its `extends`' chain), each located where the file writes it."""
    for var, value in {**ctx.stack.defaults.env, **template.env}.items():
        if isinstance(value, str) and "${SANDSTACK_" in value:
            for ref in references(value):
                yield _env_path(ctx, name, var), var, ref


def _env_path(ctx: Context, name: str, var: str) -> JsonPath:
    seen: set[str] = set()
    current: object = name
    while isinstance(current, str) and current not in seen:
        seen.add(current)
        if written(ctx, ("templates", current, "env", var)) is not None:
            return "templates", current, "env", var
        current = written(ctx, ("templates", current, "extends"))
    return "defaults", "env", var


@rule("env-reference")
def env_references_known(ctx: Context) -> Iterator[Diagnostic]:
    """A reference names a variable sandstack gives this template's sandboxes: a typo must not reach a sandbox as
    literal text."""
    for (_, name), template in templates(ctx):
        allowed = variables(template.ports)
        for where, var, ref in _env_refs(ctx, name, template):
            if ref in allowed:
                continue
            urls = "" if len(allowed) > 1 else " (it has no `exposure: url` port, so no SANDSTACK_URL_…)"
            yield ctx.error(where, f"`${{{ref}}}` in `{var}` names no variable sandstack gives template {name!r}'s "
                            f"sandboxes{urls}; use one of " + ", ".join(f"`${{{v}}}`" for v in allowed)
                            + " (`$${…}` for the literal text)", "env-reference")


@rule("env-reference-ingress")
def env_references_have_an_ingress(ctx: Context) -> Iterator[Diagnostic]:
    """A sandbox's public host name comes from its host's ingress: a pool on a host without one has none to give.
    (A template with url ports already needs the ingress: rule url-ingress says so.)"""
    for pool, name, host, _ in placements(ctx):
        template = ctx.stack.templates[name]
        if ctx.stack.hosts[host].ingress is not None or any(p.exposure == "url" for p in template.ports):
            continue
        for where, var, ref in _env_refs(ctx, name, template):
            if ref == PUBLIC_HOSTNAME:
                yield ctx.error(where, f"`${{{ref}}}` in `{var}` (template {name!r}) needs the public host name an "
                                f"ingress gives, but pool {pool!r} runs on host {host!r}, which declares no `ingress`: "
                                f"declare `hosts.{host}.ingress` or remove the reference", "env-reference-ingress")


# This module's rules, in the order they run (the registry, sandstack.spec.rules.RULES, lists each module).
RULES = (url_ports_are_routable, url_ports_have_an_ingress, env_references_known, env_references_have_an_ingress,)
