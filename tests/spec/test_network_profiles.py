"""A template's network profiles resolved: each profile whole, their envelope as the template's `network` (what the
pool's network and the logging resolver read), and `extends` never mixing a `network` with profiles."""

from __future__ import annotations

from sandstack.spec import load_stack
from sandstack.spec.egress import parse_entry
from sandstack.spec.resolve import EffectiveNetwork
from testbed.specs import host, spec, write_spec

PROFILES = {"start": "setup", "profiles": {
    "setup": {"egress": "allow-list", "allow": ["pypi.org", "github.com"], "deny": ["gist.github.com"]},
    "docs": {"egress": "allow-list", "allow": ["docs.python.org"], "deny": ["gist.github.com", "x.python.org"]},
    "locked": {"egress": "deny-all"}}}
RUNTIME_HOST = {"local": host(runtime={"token": {"secret": "runtimeToken"}})}


def _load(tmp_path, templates: dict):
    return load_stack(write_spec(tmp_path, spec(templates, hosts=RUNTIME_HOST)))


def test_each_profile_resolves_whole_and_the_templates_network_is_their_envelope(tmp_path):
    t = _load(tmp_path, {"agent": {"base_image": "busybox:1.36", "network_profiles": PROFILES}}).templates["agent"]
    assert t.start_profile == "setup"
    assert [name for name, _ in t.network_profiles] == ["setup", "docs", "locked"]
    assert dict(t.network_profiles)["locked"] == EffectiveNetwork("deny-all", (), (), False)
    # The widest mode, every allow entry, the denies every profile with egress has; logged: through the gateway.
    assert t.network == EffectiveNetwork(
        "allow-list", tuple(map(parse_entry, ["pypi.org", "github.com", "docs.python.org"])),
        (parse_entry("gist.github.com"),), True)
    assert t.network.uses_gateway


def test_an_allow_all_profile_makes_the_envelope_allow_all(tmp_path):
    profiles = {"start": "locked", "profiles": {"locked": {"egress": "deny-all"}, "web": {"egress": "allow-all"}}}
    t = _load(tmp_path, {"agent": {"base_image": "busybox:1.36", "network_profiles": profiles}}).templates["agent"]
    assert (t.network.egress, t.network.allow, t.network.log, t.network.outbound) == ("allow-all", (), True, "gateway")


def test_extends_never_mixes_a_network_with_profiles(tmp_path):
    stack = _load(tmp_path, {
        "parent": {"base_image": "busybox:1.36", "network_profiles": PROFILES},
        "plain": {"extends": "parent", "network": {"egress": "deny-all"}},
        "same": {"extends": "parent"},
    })
    plain, same = stack.templates["plain"], stack.templates["same"]
    assert (plain.network.egress, plain.network_profiles, plain.start_profile) == ("deny-all", (), None)
    assert [n for n, _ in same.network_profiles] == ["setup", "docs", "locked"] and same.start_profile == "setup"
