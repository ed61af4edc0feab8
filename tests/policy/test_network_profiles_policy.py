"""`check` and a template's network profiles: every profile is held to the built-in network rules, located at the
profile, and organisation rules see the loosest of them (docs/design/network-profiles.md)."""

from __future__ import annotations

from pathlib import Path

from sandstack.policy.org import load_policy_file
from sandstack.policy.runner import check
from tests.policy.cases import changed
from tests.policy.test_builtin_rules import value_position
from testbed.specs import write_spec

PROFILED = [
    ("templates.agent.network", None),
    ("templates.agent.network_profiles", {"start": "setup", "profiles": {
        "setup": {"egress": "allow-list", "allow": ["pypi.org", "10.1.0.0/16:443"]},
        "locked": {"egress": "deny-all"}}}),
    ("hosts.local.runtime", {"token": {"secret": "runtimeToken"}}),
]


def _findings(tmp_path: Path, data: dict, files=()):
    path = write_spec(tmp_path, data, lock=True)
    report = check([str(path)], list(files))
    assert report.invalid == [] and report.unreadable == []
    return path, report.active()


def test_each_profile_is_held_to_the_built_in_network_rules_at_its_place(tmp_path):
    path, findings = _findings(tmp_path, changed(*PROFILED))
    mine = [(f.rule, f.message, f.path) for f in findings if f.rule.startswith("SBX-NET")]
    where = "$.templates.agent.network_profiles.profiles.setup.allow[1]"
    assert mine == [("SBX-NET-003", "Template 'agent' (network profile 'setup') must not allow the private or "
                                    "link-local destination 10.1.0.0/16:443.", where)]
    finding = next(f for f in findings if f.rule == "SBX-NET-003")
    assert (finding.line, finding.column) == value_position(path.read_text(), where)


def test_an_allow_all_profile_is_refused_in_production_even_when_the_start_profile_is_locked(tmp_path):
    data = changed(*PROFILED, ("templates.agent.network_profiles", {"start": "locked", "profiles": {
        "wide": {"egress": "allow-all"}, "locked": {"egress": "deny-all"}}}))
    _, findings = _findings(tmp_path, data)
    assert [(f.rule, f.message, f.path) for f in findings if f.rule.startswith("SBX-NET")] == [
        ("SBX-NET-001", "Template 'agent' (network profile 'wide') must not use allow-all egress in a production "
                        "stack.", "$.templates.agent.network_profiles.profiles.wide.egress")]


def test_organisation_rules_see_the_loosest_profile(tmp_path):
    policy = tmp_path / "org.yaml"
    policy.write_text(
        "rules:\n  - id: ORG-NET-001\n    name: no-pypi\n    applies_to: template\n    severity: error\n"
        "    description: Checks whether a template reaches pypi.\n    message: '{name} must not reach pypi.org'\n"
        "    remediation: r\n    schema: {allow: {type: list, schema: {type: string, forbidden: [pypi.org]}}}\n")
    _, findings = _findings(tmp_path, changed(*PROFILED), [load_policy_file(policy)])
    mine = [f.message for f in findings if f.rule == "ORG-NET-001"]
    # The view's value as the message quotes it; the rest is the validator's own words.
    assert len(mine) == 1 and mine[0].startswith("agent must not reach pypi.org (allow ['pypi.org', '10.1.0.0/16:443']")
    # The start profile (locked) alone would pass it: the rule judged every profile.
    _, findings = _findings(tmp_path, changed(*PROFILED, ("templates.agent.network_profiles.start", "locked")),
                            [load_policy_file(policy)])
    assert [f.rule for f in findings if f.rule == "ORG-NET-001"] == ["ORG-NET-001"]
