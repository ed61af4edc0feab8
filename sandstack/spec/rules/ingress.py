"""Rules for URLs (`exposure: url` ports and `hosts.*.ingress`)."""

from __future__ import annotations

from typing import Iterator

from sandstack.spec.errors import Diagnostic
from sandstack.spec.rules.context import Context, placements, rule, templates


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


# This module's rules, in the order they run (the registry, sandstack.spec.rules.RULES, lists each module).
RULES = (url_ports_are_routable, url_ports_have_an_ingress,)
