"""The grammar of network `allow`/`deny` entries, parsed once into `EgressRule`s.

The same parsed rules feed the semantic check (with its exact message) and the gateway's
rendered proxy config, so what validation accepts is exactly what the gateway enforces.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Literal

# Link-local networks, where cloud metadata services answer (169.254.169.254 on AWS, GCP and Azure;
# instance credentials live there), plus AWS's IPv6 metadata address, which is unique-local rather than
# link-local. Every egress mode refuses them unless a template sets `network.allow_metadata`; the gateway's
# config and the host guard's rules both read this one tuple.
METADATA_RANGES = ("169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128")
# Addresses of the host's own networks, never of the internet: RFC 1918 private, "this network" (0.0.0.0/8),
# loopback, CGNAT shared space (100.64.0.0/10, a provider's internal network), IPv6 loopback and unique-local. An
# allow-all sandbox reaching the internet must not reach the LAN, the VPC or another Docker host's API through it,
# so every egress mode refuses them unless an `allow` entry names the destination (docs/design/egress.md says
# which entries do). Link-local is METADATA_RANGES', which has its own switch (`allow_metadata`); both tuples together
# are what no sandbox reaches by default. The gateway's config, the host guard's rules and the reference read this.
PRIVATE_RANGES = ("0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                  "::1/128", "fc00::/7")

_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_HOST_PORT = re.compile(r"^(?P<host>[^:\[\]]+)(:(?P<port>[0-9]{1,5}))?$")
_BRACKETED = re.compile(r"^\[(?P<host>[^\]]+)\](:(?P<port>[0-9]{1,5}))?$")


class EgressEntryError(ValueError):
    """An allow/deny entry that is malformed or too broad; the message says what to write instead."""


@dataclass(frozen=True, order=True)
class EgressRule:
    """One parsed entry. `value` is a domain (for 'wildcard', the suffix without '*.') or a network."""

    kind: Literal["domain", "wildcard", "cidr"]
    value: str
    port: int | None = None

    def __str__(self) -> str:
        host = f"*.{self.value}" if self.kind == "wildcard" else self.value
        if self.port is None:
            return host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"


def private_range(rule: EgressRule) -> str | None:
    """The first of PRIVATE_RANGES an address/CIDR entry overlaps (None for names and public networks)."""
    if rule.kind != "cidr":
        return None
    network = ipaddress.ip_network(rule.value)
    for private in PRIVATE_RANGES:
        candidate = ipaddress.ip_network(private)
        if network.version == candidate.version and network.overlaps(candidate):  # type: ignore[arg-type]
            return private
    return None


def parse_entry(text: str) -> EgressRule:
    entry = text.strip()
    if entry in ("*", "*.*") or entry.startswith("*:"):
        raise EgressEntryError(f"{text!r} would allow every destination: use `egress: allow-all` instead")
    if "@" in entry.split("/", 3)[2 if "://" in entry else 0]:
        # `user:password@host`: credentials have no place in an allow list, and are never printed back.
        raise EgressEntryError("an entry must not carry credentials (userinfo before '@', value not shown): write "
                               "just the host, optionally with ':port'")
    if "://" in entry:
        host = entry.split("://", 1)[1].split("/", 1)[0]
        raise EgressEntryError(f"{text!r} is a URL: write just the host, optionally with ':port', e.g. {host!r}")
    bracketed = _BRACKETED.match(entry)
    match = bracketed or _HOST_PORT.match(entry)
    if match is None:
        head, colon, tail = entry.rpartition(":")
        if colon and ":" not in head and "[" not in head:
            # One colon after a name or IPv4 address: what follows it is meant as a port.
            raise EgressEntryError(f"{text!r} has port {tail!r}; a port is a number from 1 to 65535")
        # A bare IPv6 address or network has colons of its own and no port.
        host, port = entry, None
    else:
        host, port = match.group("host"), match.group("port")
    port_number = _port(text, port)
    network = _network(text, host)
    if bracketed and not isinstance(network, ipaddress.IPv6Network):
        raise EgressEntryError(f"{text!r}: brackets are only for IPv6 addresses, as in '[2001:db8::1]:443'")
    if network is not None:
        return EgressRule("cidr", str(network), port_number)
    return _domain_rule(text, host.lower(), port_number)


def _port(text: str, port: str | None) -> int | None:
    if port is None:
        return None
    number = int(port)
    if not 1 <= number <= 65535:
        raise EgressEntryError(f"{text!r} has port {number}; ports go from 1 to 65535")
    return number


def _network(text: str, host: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    looks_ip = ":" in host or re.fullmatch(r"[0-9./]+", host) is not None
    if not looks_ip:
        return None
    if "%" in host:
        # A zone index ('%eth0') names an interface of one machine; the gateway matches global addresses.
        raise EgressEntryError(f"{text!r} has a zone index ('%{host.split('%', 1)[1]}'): write the address without it")
    try:
        network = ipaddress.ip_network(host, strict=True)
    except ValueError as exc:
        loose = _loose_network(host)
        if loose is not None:
            raise EgressEntryError(f"{text!r} has host bits set; did you mean '{loose}'?") from None
        raise EgressEntryError(f"{text!r} is not a valid IP address or CIDR ({exc})") from None
    if network.prefixlen == 0:
        raise EgressEntryError(f"{text!r} matches every address: use `egress: allow-all` instead")
    return network


def _loose_network(host: str) -> str | None:
    try:
        return str(ipaddress.ip_network(host, strict=False))
    except ValueError:
        return None


def _domain_rule(text: str, host: str, port: int | None) -> EgressRule:
    wildcard = host.startswith("*.")
    name = host[2:] if wildcard else host
    if "*" in name:
        raise EgressEntryError(f"{text!r}: a wildcard is allowed only as a whole leading label, as in '*.example.com'")
    labels = name.split(".")
    if len(name) > 253 or not all(_LABEL.match(label) for label in labels):
        raise EgressEntryError(
            f"{text!r} is not a valid domain: labels of letters, digits and '-' separated by dots, e.g. 'api.example.com'"
        )
    if labels[-1].isdigit():
        raise EgressEntryError(f"{text!r} is not a valid domain or IP address")
    if len(labels) < 2:
        if wildcard:
            raise EgressEntryError(
                f"{text!r} covers a whole top-level domain; name a registrable domain, e.g. '*.example.{name}'"
            )
        raise EgressEntryError(f"{text!r} is not a fully qualified domain: it needs a dot, e.g. '{name}.example.com'")
    return EgressRule("wildcard" if wildcard else "domain", name, port)
