"""The allow/deny entry grammar: parsed forms of good entries, exact messages for bad ones."""

from __future__ import annotations

import pytest

from sandstack.spec.egress import EgressEntryError, EgressRule, parse_entry

GOOD = [
    ("api.github.com", EgressRule("domain", "api.github.com"), "api.github.com"),
    ("API.GitHub.com", EgressRule("domain", "api.github.com"), "api.github.com"),
    ("  api.github.com  ", EgressRule("domain", "api.github.com"), "api.github.com"),
    ("a.b.c.d.example.com", EgressRule("domain", "a.b.c.d.example.com"), "a.b.c.d.example.com"),
    ("xn--bcher-kva.example", EgressRule("domain", "xn--bcher-kva.example"), "xn--bcher-kva.example"),
    ("huggingface.co:443", EgressRule("domain", "huggingface.co", 443), "huggingface.co:443"),
    ("example.com:1", EgressRule("domain", "example.com", 1), "example.com:1"),
    ("example.com:65535", EgressRule("domain", "example.com", 65535), "example.com:65535"),
    ("*.githubusercontent.com", EgressRule("wildcard", "githubusercontent.com"), "*.githubusercontent.com"),
    ("*.example.com:8443", EgressRule("wildcard", "example.com", 8443), "*.example.com:8443"),
    ("169.254.169.254", EgressRule("cidr", "169.254.169.254/32"), "169.254.169.254/32"),
    ("1.2.3.4:80", EgressRule("cidr", "1.2.3.4/32", 80), "1.2.3.4/32:80"),
    ("10.0.0.0/8", EgressRule("cidr", "10.0.0.0/8"), "10.0.0.0/8"),
    ("10.20.0.0/16:443", EgressRule("cidr", "10.20.0.0/16", 443), "10.20.0.0/16:443"),
    ("2001:db8::/32", EgressRule("cidr", "2001:db8::/32"), "2001:db8::/32"),
    ("2001:db8::1", EgressRule("cidr", "2001:db8::1/128"), "2001:db8::1/128"),
    ("::1", EgressRule("cidr", "::1/128"), "::1/128"),
    # Without brackets an IPv6 entry has no port: the last group is part of the address.
    ("2001:db8::1:443", EgressRule("cidr", "2001:db8::1:443/128"), "2001:db8::1:443/128"),
    ("[2001:db8::1]", EgressRule("cidr", "2001:db8::1/128"), "2001:db8::1/128"),
    ("[2001:db8::1]:443", EgressRule("cidr", "2001:db8::1/128", 443), "[2001:db8::1/128]:443"),
    ("[2001:DB8::/32]:443", EgressRule("cidr", "2001:db8::/32", 443), "[2001:db8::/32]:443"),
]


@pytest.mark.parametrize(("entry", "rule", "text"), GOOD, ids=[g[0].strip() for g in GOOD])
def test_good_entry(entry: str, rule: EgressRule, text: str) -> None:
    parsed = parse_entry(entry)
    assert parsed == rule
    assert str(parsed) == text
    assert parse_entry(str(parsed)) == parsed  # the canonical form parses back to itself


EVERY = "would allow every destination: use `egress: allow-all` instead"
DOMAIN = "is not a valid domain: labels of letters, digits and '-' separated by dots, e.g. 'api.example.com'"
PORTS = "ports go from 1 to 65535"
BAD = [
    ("*", f"'*' {EVERY}"),
    ("*.*", f"'*.*' {EVERY}"),
    ("*:443", f"'*:443' {EVERY}"),
    ("*.com", "'*.com' covers a whole top-level domain; name a registrable domain, e.g. '*.example.com'"),
    ("*.com:443", "'*.com:443' covers a whole top-level domain; name a registrable domain, e.g. '*.example.com'"),
    ("api.*.x.com", "'api.*.x.com': a wildcard is allowed only as a whole leading label, as in '*.example.com'"),
    ("a*.x.com", "'a*.x.com': a wildcard is allowed only as a whole leading label, as in '*.example.com'"),
    ("*.*.x.com", "'*.*.x.com': a wildcard is allowed only as a whole leading label, as in '*.example.com'"),
    ("10.0.0.1/8", "'10.0.0.1/8' has host bits set; did you mean '10.0.0.0/8'?"),
    ("2001:db8::1/32", "'2001:db8::1/32' has host bits set; did you mean '2001:db8::/32'?"),
    ("0.0.0.0/0", "'0.0.0.0/0' matches every address: use `egress: allow-all` instead"),
    ("::/0", "'::/0' matches every address: use `egress: allow-all` instead"),
    ("[::]/0", "'[::]/0' is not a valid IP address or CIDR ('[::]/0' does not appear to be an IPv4 or IPv6 "
               "network)"),
    ("example.com:0", f"'example.com:0' has port 0; {PORTS}"),
    ("example.com:65536", f"'example.com:65536' has port 65536; {PORTS}"),
    ("example.com:123456", "'example.com:123456' has port '123456'; a port is a number from 1 to 65535"),
    ("example.com:", "'example.com:' has port ''; a port is a number from 1 to 65535"),
    ("example.com:https", "'example.com:https' has port 'https'; a port is a number from 1 to 65535"),
    ("[2001:db8::1]:0", f"'[2001:db8::1]:0' has port 0; {PORTS}"),
    ("[2001:db8::1]:70000", f"'[2001:db8::1]:70000' has port 70000; {PORTS}"),
    ("[example.com]:443", "'[example.com]:443': brackets are only for IPv6 addresses, as in '[2001:db8::1]:443'"),
    ("[1.2.3.4]:443", "'[1.2.3.4]:443': brackets are only for IPv6 addresses, as in '[2001:db8::1]:443'"),
    ("[2001:db8::1", "'[2001:db8::1' is not a valid IP address or CIDR ('[2001:db8::1' does not appear to be an "
                     "IPv4 or IPv6 network)"),
    ("2001:db8::zz", "'2001:db8::zz' is not a valid IP address or CIDR ('2001:db8::zz' does not appear to be an "
                     "IPv4 or IPv6 network)"),
    ("fe80::1%eth0", "'fe80::1%eth0' has a zone index ('%eth0'): write the address without it"),
    ("256.1.1.1", "'256.1.1.1' is not a valid IP address or CIDR ('256.1.1.1' does not appear to be an IPv4 or "
                  "IPv6 network)"),
    ("1.2.3.4/33", "'1.2.3.4/33' is not a valid IP address or CIDR ('1.2.3.4/33' does not appear to be an IPv4 or "
                   "IPv6 network)"),
    ("localhost", "'localhost' is not a fully qualified domain: it needs a dot, e.g. 'localhost.example.com'"),
    ("intranet:8080", "'intranet:8080' is not a fully qualified domain: it needs a dot, e.g. "
                      "'intranet.example.com'"),
    ("example.123", "'example.123' is not a valid domain or IP address"),
    ("-bad.example.com", f"'-bad.example.com' {DOMAIN}"),
    ("bad-.example.com", f"'bad-.example.com' {DOMAIN}"),
    ("a..example.com", f"'a..example.com' {DOMAIN}"),
    ("exa_mple.com", f"'exa_mple.com' {DOMAIN}"),
    ("http://example.com", "'http://example.com' is a URL: write just the host, optionally with ':port', e.g. "
                           "'example.com'"),
    ("https://api.example.com:8443/v1", "'https://api.example.com:8443/v1' is a URL: write just the host, "
                                        "optionally with ':port', e.g. 'api.example.com:8443'"),
    ("example.com/path", f"'example.com/path' {DOMAIN}"),
    ("x" * 64 + ".com", f"'{'x' * 64}.com' {DOMAIN}"),
    ("", f"'' {DOMAIN}"),
]


@pytest.mark.parametrize(("entry", "message"), BAD, ids=[b[0][:20] or "empty" for b in BAD])
def test_bad_entry(entry: str, message: str) -> None:
    with pytest.raises(EgressEntryError) as caught:
        parse_entry(entry)
    assert str(caught.value) == message


def test_a_domain_of_253_characters_is_the_limit() -> None:
    name = ".".join(["a" * 63] * 3 + ["b" * 61])  # 253 characters
    assert parse_entry(name) == EgressRule("domain", name)
    with pytest.raises(EgressEntryError):
        parse_entry("c" + name)


def test_metadata_ranges_are_strict_networks_named_in_the_field_description() -> None:
    """The gateway and the guard import METADATA_RANGES; the spec's reference must name the same ranges."""
    import ipaddress

    from sandstack.spec.egress import METADATA_RANGES
    from sandstack.spec.models import NetworkPolicy

    assert METADATA_RANGES == ("169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128")
    assert [str(ipaddress.ip_network(r, strict=True)) for r in METADATA_RANGES] == list(METADATA_RANGES)
    description = NetworkPolicy.model_fields["allow_metadata"].description
    assert "169.254.0.0/16" in description and "fe80::/10" in description and "fd00:ec2::254" in description
    assert NetworkPolicy().allow_metadata is False


def test_private_ranges_are_strict_networks_apart_from_metadata_and_named_in_the_allow_description() -> None:
    """The gateway, the guard and the policy import PRIVATE_RANGES; the reference of `allow` names each range, and
    link-local stays METADATA_RANGES' (its own switch, `allow_metadata`)."""
    import ipaddress

    from sandstack.spec.egress import METADATA_RANGES, PRIVATE_RANGES, private_range
    from sandstack.spec.models import NetworkPolicy

    assert PRIVATE_RANGES == ("0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "172.16.0.0/12",
                              "192.168.0.0/16", "::1/128", "fc00::/7")
    assert [str(ipaddress.ip_network(r, strict=True)) for r in PRIVATE_RANGES] == list(PRIVATE_RANGES)
    assert not any(ipaddress.ip_network(p).overlaps(ipaddress.ip_network(m)) for p in PRIVATE_RANGES
                   for m in METADATA_RANGES[:2] if ipaddress.ip_network(p).version == ipaddress.ip_network(m).version)
    assert f"({', '.join(PRIVATE_RANGES)})" in NetworkPolicy.model_fields["allow"].description
    assert [private_range(parse_entry(e)) for e in ("10.1.2.3", "0.0.0.0/1", "[fd12::1]:22", "203.0.113.0/24",
                                                    "db.internal", "100.127.255.255")] == [
        "10.0.0.0/8", "0.0.0.0/8", "fc00::/7", None, None, "100.64.0.0/10"]


@pytest.mark.parametrize("egress, log, decoded", [
    ("deny-all", None, ("none", False)),
    ("allow-list", None, ("gateway", True)),
    ("allow-list", True, ("gateway", True)),
    ("allow-all", None, ("gateway", True)),
    ("allow-all", True, ("gateway", True)),
    ("allow-all", False, ("direct", False)),
])
def test_egress_and_log_are_decoded_in_one_place(egress, log, decoded):
    from sandstack.spec.resolve import decode_egress

    assert decode_egress(egress, log) == decoded
