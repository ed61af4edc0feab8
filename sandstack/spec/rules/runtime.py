"""Rules for the host's runtime: the exec limits a template declares, scoped tokens, its SSH endpoint, and what only
a runtime does (hibernating idle sessions)."""

from __future__ import annotations

from typing import Iterator

from sandstack.spec.errors import Diagnostic
from sandstack.spec.rules.context import Context, hosts_without_runtime, rule, templates, written
from sandstack.spec.units import MIB

MAX_EXEC_TIMEOUT = 24 * 3600  # seconds: the longest exec any agent product we replace allows
MAX_EXEC_OUTPUT = 64 * MIB  # bytes per stream: the runtime holds an exec's output in memory until it answers


@rule("exec-limits")
def exec_limits_are_bounded(ctx: Context) -> Iterator[Diagnostic]:
    """An exec's timeout and output are bounded for the runtime's sake: its memory holds the output, and a
    command past a day is a service, not a session's command."""
    blocks = [(("defaults", "session"), ctx.stack.defaults.session if ctx.stack.defaults else None)]
    blocks += [(path + ("session",), template.session) for path, template in templates(ctx)]
    for path, session in blocks:
        if session is None:
            continue
        if session.exec_max_timeout > MAX_EXEC_TIMEOUT:
            where = path + ("exec_max_timeout",)
            yield ctx.error(where, f"exec_max_timeout {written(ctx, where)!r} is longer than the runtime allows: "
                            "at most '1d'", "exec-limits")
        if session.exec_output_limit > MAX_EXEC_OUTPUT:
            where = path + ("exec_output_limit",)
            yield ctx.error(where, f"exec_output_limit {written(ctx, where)!r} is more than the runtime keeps of "
                            "one stream: at most '64MiB'", "exec-limits")


@rule("runtime-tokens")
def scoped_tokens_name_placed_pools(ctx: Context) -> Iterator[Diagnostic]:
    """A scoped token acts on pools of its host: each must exist and be placed there; its secret is not the
    host's token (which acts on everything)."""
    for host, spec in ctx.stack.hosts.items():
        if spec.runtime is None:
            continue
        for scope, token in spec.runtime.tokens.items():
            path = ("hosts", host, "runtime", "tokens", scope)
            if token.secret == spec.runtime.token.secret:
                yield ctx.error(path + ("secret",), f"scoped token {scope!r} uses the host's own token secret "
                                f"{token.secret!r}, which acts on every pool: give it a secret of its own",
                                "runtime-tokens")
            for i, pool in enumerate(token.pools):
                placed = ctx.stack.pools.get(pool)
                if placed is None or host not in placed.hosts:
                    where = "is not defined" if placed is None else f"is not placed on host {host!r}"
                    yield ctx.error(path + ("pools", i), f"scoped token {scope!r} names pool {pool!r}, which {where}; "
                                    f"pools on host {host!r}: "
                                    + (", ".join(n for n, p in ctx.stack.pools.items() if host in p.hosts) or "none"),
                                    "runtime-tokens")


@rule("runtime-ssh")
def ssh_endpoint_has_its_own_port_and_key(ctx: Context) -> Iterator[Diagnostic]:
    """The SSH endpoint listens beside the runtime's API (and the ingress, on the same host): its port is neither's;
    its host key is a secret of its own, not a token's (a token is sent to the runtime, a host key never leaves it)."""
    for host, spec in ctx.stack.hosts.items():
        runtime = spec.runtime
        if runtime is None or runtime.ssh is None:
            continue
        path = ("hosts", host, "runtime", "ssh")
        taken = {runtime.port: f"the runtime API's port (`hosts.{host}.runtime.port`)"}
        if spec.ingress is not None:
            taken.setdefault(spec.ingress.port, f"the ingress's port (`hosts.{host}.ingress.port`)")
        if runtime.ssh.port in taken:
            yield ctx.error(path + ("port",), f"SSH port {runtime.ssh.port} is {taken[runtime.ssh.port]} on host "
                            f"{host!r}: give the SSH endpoint a port of its own", "runtime-ssh")
        tokens = {runtime.token.secret: "the runtime's token"}
        tokens.update({t.secret: f"scoped token {scope!r}" for scope, t in runtime.tokens.items()})
        key = runtime.ssh.host_key.secret
        if key in tokens:
            yield ctx.error(path + ("host_key", "secret"), f"the SSH host key's secret {key!r} is also {tokens[key]}'s "
                            "on host " f"{host!r}: a token is not a private key; give the host key a secret of its own",
                            "runtime-ssh")


@rule("session-runtime")
def hibernation_needs_runtime(ctx: Context) -> Iterator[Diagnostic]:
    """`session.idle: hibernate` is done by the runtime: a pool of such a template on hosts none of which runs one
    would never hibernate (no session ever binds its sandboxes, so none is idle). A pool with a runtime on some of
    its hosts hibernates there, which is what the template asks."""
    for name, pool in ctx.stack.pools.items():
        template = ctx.stack.templates.get(pool.template)
        hosts = [ctx.stack.hosts[h] for h in pool.hosts if h in ctx.stack.hosts]
        if template is None or not hosts or any(h.runtime is not None for h in hosts):
            continue
        session = template.session or ctx.stack.defaults.session
        if session is not None and session.idle == "hibernate":
            where = (("templates", pool.template, "session", "idle") if template.session is not None
                     else ("defaults", "session", "idle"))
            yield ctx.error(("pools", name, "hosts"), f"template {pool.template!r} hibernates idle sessions "
                            f"(`{'.'.join(where)}: hibernate`), but no host of pool {name!r} ("
                            + ", ".join(pool.hosts) + ") declares a runtime, which binds sessions and hibernates "
                            "them: its sandboxes would never hibernate; add `runtime` to a host, or set another "
                            "`session.idle`", "session-runtime")




@rule("url-auth")
def url_auth_needs_runtime(ctx: Context) -> Iterator[Diagnostic]:
    """`urls.auth: session` is checked by the host's runtime (it holds the session tokens): every host of a pool of
    such a template must run one, and the template must have a url port for it to guard."""
    for name, pool in ctx.stack.pools.items():
        template = ctx.stack.templates.get(pool.template)
        urls = template and (template.urls or ctx.stack.defaults.urls)
        if urls is None or urls.auth != "session":
            continue
        where = (("templates", pool.template, "urls", "auth") if template.urls is not None
                 else ("defaults", "urls", "auth"))
        if not any(p.exposure == "url" for p in template.ports):
            if template.urls is None:
                continue  # the stack's defaults ask it of every template: one without URLs has none to guard
            yield ctx.error(where, f"template {pool.template!r} (pool {name!r}) asks for session tokens on its URLs, "
                            "but has no port with `exposure: url`: nothing to guard; add a url port or remove "
                            "`urls.auth`", "url-auth")
            continue
        bare = [host for _, host in hosts_without_runtime(ctx, name)]
        if bare:
            yield ctx.error(("pools", name, "hosts"), f"template {pool.template!r} asks for session tokens on its "
                            f"URLs (`{'.'.join(where)}: session`), but host(s) " + ", ".join(bare) + f" of pool "
                            f"{name!r} declare no runtime, which holds the session tokens the ingress checks; add "
                            "`runtime` to them, or set `urls.auth: none`", "url-auth")


# This module's rules, in the order they run (the registry, sandstack.spec.rules.RULES, lists each module).
RULES = (exec_limits_are_bounded, scoped_tokens_name_placed_pools, ssh_endpoint_has_its_own_port_and_key,
         hibernation_needs_runtime, url_auth_needs_runtime)
