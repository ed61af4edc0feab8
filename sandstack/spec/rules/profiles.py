"""A template's network profiles (docs/design/network-profiles.md): one policy or the other, a start that is one
of them, one route for all, one metadata choice, and a runtime on every host that places them."""

from __future__ import annotations

from typing import Iterator

from sandstack.spec.errors import Diagnostic
from sandstack.spec.resolve import decode_egress
from sandstack.spec.rules.context import Context, hosts_without_runtime, rule, templates


@rule("network-profiles")
def network_profiles_fit(ctx: Context) -> Iterator[Diagnostic]:
    for path, template in templates(ctx):
        profiles = template.network_profiles
        if profiles is None:
            continue
        where = path + ("network_profiles",)
        if "network" in template.model_fields_set and template.network is not None:
            yield ctx.error(where, "a template sets `network` or `network_profiles`, not both: the start profile "
                            "(`network_profiles.start`) is the policy a session starts in; move `network` into "
                            "`network_profiles.profiles`", "network-profiles", key=True)
        names = sorted(profiles.profiles)
        if profiles.start not in profiles.profiles:
            yield ctx.error(where + ("start",), f"{profiles.start!r} is not a profile of this template; its "
                            f"profiles: {', '.join(names)}", "network-profiles")
        if all(p.egress == "deny-all" for p in profiles.profiles.values()):
            yield ctx.error(where + ("profiles",), "every profile is 'deny-all': a switch would change nothing; give "
                            "one egress ('allow-list' or 'allow-all'), or use `network: {egress: deny-all}`",
                            "network-profiles")
        first_metadata = None
        for name, policy in profiles.profiles.items():
            outbound, _ = decode_egress(policy.egress, policy.log, policy.protocols)
            if outbound == "direct":
                key = "protocols" if policy.protocols == "any" else "log"
                yield ctx.error(where + ("profiles", name, key), f"profile {name!r} has a direct route out "
                                f"({'`protocols: any`' if key == 'protocols' else '`log: false`'}), which puts its "
                                "sandboxes on a routed network of their own; a switch must never move a sandbox "
                                "to another network, so every profile goes through the gateway ('deny-all', "
                                "'allow-list', or logged 'allow-all' with `protocols: http`)", "network-profiles")
            if first_metadata is None:
                first_metadata = (name, policy.allow_metadata)
            elif policy.allow_metadata != first_metadata[1]:
                yield ctx.error(where + ("profiles", name, "allow_metadata"), f"profile {name!r} sets "
                                f"`allow_metadata: {str(policy.allow_metadata).lower()}` and profile "
                                f"{first_metadata[0]!r} `{str(first_metadata[1]).lower()}`: the host guard's rules "
                                "follow the template, not the profile, so every profile sets the same",
                                "network-profiles")
    for pool_name, pool in ctx.stack.pools.items():
        template = ctx.stack.templates.get(pool.template)
        if template is None or template.network_profiles is None:
            continue
        for i, host in hosts_without_runtime(ctx, pool_name):
            yield ctx.error(("pools", pool_name, "hosts", i), f"host {host!r} has no `runtime`, which switches "
                            f"a session's network profile; template {pool.template!r} declares profiles "
                            f"({', '.join(sorted(template.network_profiles.profiles))}): give the host a "
                            "`runtime`, or place the pool elsewhere", "network-profiles")


RULES = (network_profiles_fit,)
