"""Egress policies: entry grammar, fields that fit the mode, allow entries the metadata block would make dead."""

from __future__ import annotations

import ipaddress
from typing import Iterator

from sandstack.spec.egress import (METADATA_RANGES, PRIVATE_RANGES, EgressEntryError, EgressRule, parse_entry,
                                   private_range)
from sandstack.spec.errors import Diagnostic, JsonPath
from sandstack.spec.models import NetworkPolicy
from sandstack.spec.resolve import decode_egress
from sandstack.spec.rules.context import Context, policies, rule


@rule("egress-entry")
def egress_entries_well_formed(ctx: Context) -> Iterator[Diagnostic]:
    for path, policy in policies(ctx):
        for kind in ("allow", "deny"):
            for i, entry in enumerate(getattr(policy, kind)):
                try:
                    parse_entry(entry)
                except EgressEntryError as exc:
                    yield ctx.error(path + (kind, i), str(exc), "egress-entry")


@rule("egress-mode")
def egress_fields_fit_mode(ctx: Context) -> Iterator[Diagnostic]:
    for path, policy in policies(ctx):
        mode = policy.egress
        outbound, _ = decode_egress(mode, policy.log, policy.protocols)
        if policy.allow and mode == "deny-all":
            yield ctx.error(path + ("allow",), "`allow` entries need 'allow-list' (the destinations it reaches) or "
                            "'allow-all' (the private destinations it reaches too); this policy is 'deny-all'",
                            "egress-mode", key=True)
        if mode == "allow-all":
            yield from _allow_all_entries(ctx, path, policy, direct=outbound == "direct")
        if mode == "allow-list" and not policy.allow:
            yield ctx.error(path + ("egress",), "'allow-list' with no `allow` entries allows nothing: list the "
                            "destinations, or use 'deny-all'", "egress-mode")
        if policy.deny and mode == "deny-all":
            yield ctx.error(path + ("deny",), "`deny` entries narrow what is allowed, but nothing is allowed in "
                            "'deny-all'", "egress-mode", key=True)
        if outbound == "direct":
            yield from _direct_deny_entries(ctx, path, policy)
        if mode == "allow-list" and policy.log is False:
            yield ctx.error(path + ("log",), "'allow-list' egress always goes through the gateway, which logs every "
                            "request: remove `log: false` (only 'allow-all' has an unlogged, direct mode)",
                            "egress-mode", key=True)
        if mode == "deny-all" and policy.log:
            yield ctx.error(path + ("log",), "'deny-all' has no egress to log: remove `log`", "egress-mode", key=True)
        if policy.protocols is not None and (mode != "allow-all" or policy.log is False):
            yield ctx.error(path + ("protocols",), "`protocols` chooses how logged 'allow-all' egress leaves (through "
                            f"the gateway, or direct with every connection logged); this policy is {mode!r}"
                            + (" with `log: false`" if policy.log is False else "") + ": remove `protocols`",
                            "egress-mode", key=True)
        if "connections" in policy.model_fields_set and outbound != "direct":
            route = "leaves through the gateway, which bounds its connections" if outbound == "gateway" else "has none"
            yield ctx.error(path + ("connections",), "`connections` bounds a direct route (unlogged 'allow-all' or "
                            f"`protocols: any`); this policy's egress {route}: remove `connections`",
                            "egress-mode", key=True)
        if mode == "deny-all" and policy.allow_metadata:
            yield ctx.error(path + ("allow_metadata",), "'deny-all' reaches no address, link-local or other: remove "
                            "`allow_metadata`, or pick 'allow-list' or 'allow-all'", "egress-mode", key=True)


def _direct_deny_entries(ctx: Context, path: JsonPath, policy: NetworkPolicy) -> Iterator[Diagnostic]:
    """Unlogged 'allow-all' has no gateway: the host guard's firewall enforces `deny`, and a firewall sees
    addresses, never the names a connection was made for."""
    for i, entry in enumerate(policy.deny):
        try:
            kind = parse_entry(entry).kind
        except EgressEntryError:
            continue  # reported by egress-entry
        if kind != "cidr":
            yield ctx.error(path + ("deny", i), f"{entry!r}: a domain deny needs the gateway to see names; with "
                            "`log: false` or `protocols: any` the sandbox connects directly, so only addresses and CIDRs can be denied, "
                            "optionally with a port (e.g. '203.0.113.7', '10.0.0.0/8:443'); or send egress through "
                            "the gateway (`log: true` with `protocols: http`)", "egress-mode")


def _allow_all_entries(ctx: Context, path: JsonPath, policy: NetworkPolicy, direct: bool) -> Iterator[Diagnostic]:
    """In 'allow-all' an `allow` entry names a private destination the sandbox may reach (every mode refuses
    PRIVATE_RANGES otherwise): an entry that can name none is a reviewer's trap, and a direct route's firewall sees
    addresses only, and exempts whole addresses (docs/design/egress.md)."""
    for i, entry in enumerate(policy.allow):
        try:
            rule_ = parse_entry(entry)
        except EgressEntryError:
            continue  # reported by egress-entry
        where = path + ("allow", i)
        if rule_.kind == "wildcard":
            yield ctx.error(where, f"{entry!r}: in 'allow-all' an `allow` entry lets the sandbox reach a private "
                            "address, and a wildcard names no host (anyone who can add a subdomain could point it "
                            "there): name the host ('db.example.com') or the address or CIDR", "egress-mode")
        elif rule_.kind == "cidr" and private_range(rule_) is None and _metadata_range(entry) is None:
            yield ctx.error(where, f"{entry!r} is not a private address ({', '.join(PRIVATE_RANGES)}), which "
                            "'allow-all' reaches already: in 'allow-all' an `allow` entry names a private destination; "
                            "remove it", "egress-mode")
        elif direct and rule_.kind == "domain":
            yield ctx.error(where, f"{entry!r}: with `log: false` or `protocols: any` the sandbox connects directly "
                            "and the host guard's firewall sees addresses, not names: write the private address or "
                            "CIDR (e.g. '10.0.0.5'); or send egress through the gateway (`log: true` with "
                            "`protocols: http`)", "egress-mode")
        elif direct and rule_.port is not None:
            yield ctx.error(where, f"{entry!r}: on a direct route the host guard lets a whole address through (every "
                            f"protocol and port): write '{EgressRule('cidr', rule_.value)}' without the port, or send "
                            "egress through the gateway (`log: true` with `protocols: http`), which allows one port",
                            "egress-mode")


@rule("egress-metadata")
def allow_entries_outside_metadata(ctx: Context) -> Iterator[Diagnostic]:
    """An allow entry wholly inside METADATA_RANGES allows nothing while `allow_metadata` is false: the gateway
    and the guard refuse those addresses first. Say so here rather than leave a silently dead entry."""
    for path, policy in policies(ctx):
        if policy.allow_metadata:
            continue
        for i, entry in enumerate(policy.allow):
            blocked = _metadata_range(entry)
            if blocked is not None:
                yield ctx.error(path + ("allow", i), f"{entry!r} is inside {blocked}, which every mode refuses "
                                "(cloud metadata and link-local addresses) unless `allow_metadata: true`: set it, "
                                "a reviewable loosening, or remove the entry", "egress-metadata")


def _metadata_range(entry: str) -> str | None:
    try:
        parsed = parse_entry(entry)
    except EgressEntryError:
        return None  # reported by egress-entry
    if parsed.kind != "cidr":
        return None
    network = ipaddress.ip_network(parsed.value)
    for blocked in METADATA_RANGES:
        candidate = ipaddress.ip_network(blocked)
        if network.version == candidate.version and network.subnet_of(candidate):  # type: ignore[arg-type]
            return blocked
    return None


@rule("connection-bounds")
def sandbox_bounds_within_pool_bounds(ctx: Context) -> Iterator[Diagnostic]:
    """A sandbox's own connection bound above its pool's is never reached (the pool's, which counts that sandbox
    too, refuses first): a rate or an open count that reads larger than it acts is a reviewer's trap."""
    for path, policy in policies(ctx):
        bounds = policy.connections
        for own, pool, words in (("rate", "pool_rate", "new connections per second"),
                                 ("open", "pool_open", "open connections")):
            mine, theirs = getattr(bounds, own), getattr(bounds, pool)
            if mine > theirs:
                set_here = own if own in bounds.model_fields_set else pool
                yield ctx.error(path + ("connections", set_here), f"`connections.{own}` {mine} ({words} per sandbox) "
                                f"is above `connections.{pool}` {theirs} (the whole pool's): the pool's bound refuses "
                                f"first, so a sandbox never gets more than {theirs}; lower `{own}` to at most "
                                f"{theirs}, or raise `{pool}`", "connection-bounds")


# This module's rules, in the order they run (the registry, sandstack.spec.rules.RULES, lists each module).
RULES = (egress_entries_well_formed, egress_fields_fit_mode, allow_entries_outside_metadata,
         sandbox_bounds_within_pool_bounds,)
