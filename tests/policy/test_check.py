"""`sandstack check`: exit statuses, suppressions, organisation policies, secrets never echoed, SARIF, --base."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from jsonschema import Draft4Validator

from sandstack.policy.org import message_problem, render_message
from sandstack.tooling.cli import main
from tests.policy.cases import CLEAN, changed
from testbed.specs import REPO, STACKS, write_spec

TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
SARIF_SCHEMA = json.loads((Path(__file__).parent / "sarif-schema-2.1.0.json").read_text())
POLICIES = REPO / "policies"


def _check(tmp_path: Path, capsys, data: dict, *extra: str) -> tuple[int, str, str]:
    path = write_spec(tmp_path / "spec", data, lock=True)  # locked, as a committed stack (SBX-ADDR-001 apart)
    code = main(["check", str(path), *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_committed_stacks_are_clean_with_reasoned_suppressions(capsys):
    code = main(["check", str(STACKS / "dev.yaml"), str(STACKS / "prod.yaml"), "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [(f["rule"], f["target"]) for f in data["findings"] if f["suppressed"] is None] == []
    assert all(f["suppressed"] for f in data["findings"])
    assert data["summary"] == "0 errors, 0 warnings, 2 suppressed"


def test_the_issue_s_unsafe_stack_is_refused_and_the_token_never_printed(tmp_path, capsys):
    # A privileged root sandbox, unlogged allow-all egress, a plaintext token and a token as a secret key.
    data = changed(("templates.agent.security", {"privileged": True}), ("templates.agent.user", "0:0"),
                   ("templates.agent.network", {"egress": "allow-all", "log": False}),
                   ("templates.agent.env.GITHUB_TOKEN", TOKEN), ("templates.agent.env.API", {"secret": TOKEN}),
                   ("policy.production", False))
    for fmt in ("text", "json", "github", "sarif"):
        code, out, err = _check(tmp_path, capsys, data, "--format", fmt)
        assert code == 1
        assert TOKEN not in out + err and TOKEN[:12] not in out + err
    code, out, _ = _check(tmp_path, capsys, data, "--format", "json")
    rules = sorted({f["rule"] for f in json.loads(out)["findings"]})
    assert rules == ["SBX-NET-002", "SBX-PRIV-001", "SBX-PRIV-003", "SBX-SEC-001", "SBX-SEC-002"]


def test_warnings_fail_only_with_strict(tmp_path, capsys):
    data = changed(("templates.agent.network.allow_metadata", True))
    assert _check(tmp_path, capsys, data)[0] == 0
    assert _check(tmp_path, capsys, data, "--strict")[0] == 1


def test_a_suppression_needs_a_reason_and_an_unused_one_is_reported(tmp_path, capsys):
    base = changed(("templates.agent.network.allow_metadata", True))
    data = changed(("templates.agent.network.allow_metadata", True), ("policy.suppressions", [
        {"rule": "SBX-NET-004", "target": "template/agent", "reason": "needs instance credentials"},
        {"rule": "SBX-PRIV-001", "target": "template/agent", "reason": "nothing to suppress"}]))
    code, out, _ = _check(tmp_path, capsys, data, "--format", "json", "--strict")
    findings = json.loads(out)["findings"]
    assert code == 1  # the unused suppression is a warning
    assert [(f["rule"], f["suppressed"]) for f in findings] == [
        ("SBX-NET-004", "needs instance credentials"), ("SBX-POL-001", None)]
    assert findings[1]["message"] == "Suppression of SBX-PRIV-001 on template/agent matches no finding."
    code, out, _ = _check(tmp_path, capsys, data, "--format", "json", "--no-suppressions")
    assert [f["suppressed"] for f in json.loads(out)["findings"]] == [None]
    del base
    no_reason = changed(("policy.suppressions", [{"rule": "SBX-NET-004", "target": "template/agent", "reason": ""}]))
    code, _, err = _check(tmp_path, capsys, no_reason)
    assert code == 1 and "$.policy.suppressions[0].reason" in err + _


def _refused_reason(tmp_path, capsys, reason: str) -> dict:
    """check's one invalid record for a suppression with this reason (exit 1)."""
    data = changed(("templates.agent.network.allow_metadata", True), ("policy.suppressions", [
        {"rule": "SBX-NET-004", "target": "template/agent", "reason": reason}]))
    code, out, _ = _check(tmp_path, capsys, data, "--format", "json")
    assert code == 1
    [invalid] = json.loads(out)["invalid"]
    return invalid


@pytest.mark.parametrize("reason", ["", "   ", "\t\n"])
def test_a_blank_reason_is_no_reason(reason, tmp_path, capsys):
    invalid = _refused_reason(tmp_path, capsys, reason)
    assert invalid["path"] == "$.policy.suppressions[0].reason"
    assert invalid["message"] == f"{reason!r} is not a valid reason: use a sentence saying why the finding is accepted"


NO_WORD = ("not a valid reason: say why the finding is accepted in words (at least one word of 3 letters; spaces, "
           "punctuation, digits and invisible characters such as a zero-width space are not words)")


@pytest.mark.parametrize("reason", [".", "\u200b", " \u200b\u200d. ", "ok", "n/a", "12345", "-- !!", "\u0301\u0301\u0301"])
def test_a_reason_without_a_word_is_no_reason(reason, tmp_path, capsys):
    invalid = _refused_reason(tmp_path, capsys, reason)
    assert (invalid["line"], invalid["path"], invalid["message"]) == (51, "$.policy.suppressions[0].reason", NO_WORD)


@pytest.mark.parametrize("reason", ["yes", "needs instance credentials", "Prüfung durch das Team", "審査済みです",
                                    "re\u200bviewed"])
def test_a_reason_with_a_word_in_any_script_is_accepted(reason, tmp_path, capsys):
    data = changed(("templates.agent.network.allow_metadata", True), ("policy.suppressions", [
        {"rule": "SBX-NET-004", "target": "template/agent", "reason": reason}]))
    code, out, _ = _check(tmp_path, capsys, data, "--format", "json", "--strict")
    assert code == 0 and [f["suppressed"] for f in json.loads(out)["findings"]] == [reason]


def test_a_stack_cannot_turn_a_rule_off_only_a_policy_file_can(tmp_path, capsys):
    privileged = changed(("templates.agent.security", {"privileged": True}))
    off = changed(("templates.agent.security", {"privileged": True}), ("policy.severity", {"SBX-PRIV-001": "off"}))
    code, out, _ = _check(tmp_path, capsys, off, "--format", "json")
    [invalid] = json.loads(out)["invalid"]
    assert code == 1 and invalid["path"] == "$.policy.severity.SBX-PRIV-001"
    assert invalid["message"] == ("'off' is not a valid value: use 'error' or 'warning' (a stack cannot turn a rule "
                                  "off: accept a finding with a suppression in `policy.suppressions`, which needs a "
                                  "reason)")
    # The organisation may: a policy file CI passes sets it off, and --no-suppressions (the stack's) keeps it off.
    policy = tmp_path / "org.yaml"
    policy.write_text("rules: []\nconfig:\n  severity: {SBX-PRIV-001: \"off\"}\n")
    for extra in ((), ("--no-suppressions",)):
        code, out, _ = _check(tmp_path, capsys, privileged, "--policy", str(policy), "--format", "json", *extra)
        assert code == 0 and json.loads(out)["findings"] == []
    # A stack may still make a rule stricter.
    stricter = changed(("templates.agent.network.allow_metadata", True), ("policy.severity", {"SBX-NET-004": "error"}))
    code, out, _ = _check(tmp_path, capsys, stricter, "--format", "json")
    assert code == 1 and [(f["rule"], f["severity"]) for f in json.loads(out)["findings"]] == [("SBX-NET-004", "error")]


PORTS_9090 = (("templates.agent.ports", [{"port": 8080, "exposure": "public"}, {"port": 9090, "exposure": "public"}]),
              ("policy.public_ports", [8080, 9090]))
ORG_PORT = ("Template 'agent' must expose only port 8080 publicly (public_ports [8080, 9090]: {1: ['unallowed value "
            "9090']}).")


def test_a_stack_cannot_downgrade_or_suppress_an_organisation_rule(tmp_path, capsys):
    # The stack CI checks against an organisation policy tried to weaken it: a warning (exit 0) and a suppression.
    ports = POLICIES / "ports.yaml"
    data = changed(*PORTS_9090, ("policy.severity", {"ORG-PORT-001": "warning", "SBX-NET-004": "error"}),
                   ("policy.suppressions", [{"rule": "ORG-PORT-001", "target": "template/agent",
                                             "reason": "we need the port"}]))
    code, out, _ = _check(tmp_path, capsys, data, "--policy", str(ports), "--format", "json")
    report = json.loads(out)
    assert code == 1
    assert [(d["line"], d["column"], d["path"], d["message"]) for d in report["invalid"]] == [
        (51, 5, "$.policy.severity.ORG-PORT-001",
         f"ORG-PORT-001 is organisation rule 'public-port-8080' ({ports}:5:9): a stack cannot change its severity; "
         "only a policy file's `config.severity` can (a stack's `policy.severity` may name built-in rules only)"),
        (54, 11, "$.policy.suppressions[0].rule",
         f"ORG-PORT-001 is organisation rule 'public-port-8080' ({ports}:5:9): a stack cannot suppress it; only a "
         "policy file's `config.suppressions` can (fix the finding, or ask the policy's owners)")]
    assert [(f["rule"], f["severity"], f["suppressed"], f["message"]) for f in report["findings"]] == [
        ("ORG-PORT-001", "error", None, ORG_PORT),
        ("SBX-PORT-001", "error", None, "Template 'agent' must not expose port(s) 9090 publicly (allowed: 8080).")]
    # Without the organisation's file the stack's settings name no known rule: an unused suppression, as before.
    code, out, _ = _check(tmp_path, capsys, data, "--format", "json")
    assert code == 0 and [f["rule"] for f in json.loads(out)["findings"]] == ["SBX-POL-001"]


def test_a_policy_file_may_downgrade_or_suppress_an_organisation_rule(tmp_path, capsys):
    rule_only = (POLICIES / "ports.yaml").read_text().replace("config:\n  public_ports: [8080]\n", "")
    org = tmp_path / "org.yaml"
    org.write_text(rule_only + "config:\n  severity: {ORG-PORT-001: warning}\n")
    code, out, _ = _check(tmp_path, capsys, changed(*PORTS_9090), "--policy", str(org), "--format", "json")
    assert code == 0 and [(f["rule"], f["severity"]) for f in json.loads(out)["findings"]] == [
        ("ORG-PORT-001", "warning")]
    org.write_text(rule_only)
    exempt = tmp_path / "exempt.yaml"
    exempt.write_text("rules: []\nconfig:\n  suppressions: [{rule: ORG-PORT-001, target: template/agent, "
                      "reason: the platform team reviewed port 9090}]\n")
    code, out, _ = _check(tmp_path, capsys, changed(*PORTS_9090), "--policy", str(org), "--policy", str(exempt),
                          "--format", "json")
    assert code == 0 and [(f["rule"], f["suppressed"]) for f in json.loads(out)["findings"]] == [
        ("ORG-PORT-001", "the platform team reviewed port 9090")]


def test_a_policy_file_s_ceilings_in_units_merge_with_the_stack_s(tmp_path, capsys):
    # Both sides set durations and sizes in units; the merge keeps them parsed (it once re-parsed seconds).
    data = changed(("templates.agent.lifecycle.max_lifetime", "3h"), ("policy.ceilings", {"max_lifetime": "12h"}))
    policy = tmp_path / "org.yaml"
    policy.write_text("rules: []\nconfig:\n  ceilings: {max_lifetime: 2h, memory: 1GiB}\n")
    code, out, _ = _check(tmp_path, capsys, data, "--policy", str(policy), "--format", "json")
    assert code == 1 and [f["message"] for f in json.loads(out)["findings"]] == [
        "Template 'agent' must have at most 1GiB of memory, not 2GiB.",
        "Template 'agent' must have a max lifetime of at most 2h, not 3h."]


@pytest.mark.parametrize(("policy", "change", "rule", "message"), [
    ("memory.yaml", ("templates.agent.limits.memory", "1025MiB"), "ORG-MEM-001",
     "Template 'agent' must have between 512MiB and 8GiB of memory, in an even number of MiB (memory_mib 1025: "
     "must be even)."),
    ("memory.yaml", ("templates.agent.limits.memory", "16GiB"), "ORG-MEM-001",
     "Template 'agent' must have between 512MiB and 8GiB of memory, in an even number of MiB (memory_mib 16384: "
     "max value is 8192)."),
    ("cpus.yaml", ("templates.agent.limits.cpus", 3), "ORG-CPU-001",
     "Template 'agent' must have 1, 2, 4 or 8 CPUs (cpus 3.0: unallowed value 3.0)."),
    ("lifetime.yaml", ("templates.agent.lifecycle.max_lifetime", "5s"), "ORG-LIFE-001",
     "Template 'agent' must have a max lifetime between 10s and 24h (max_lifetime_s 5: min value is 10)."),
    ("exec.yaml", ("templates.agent.session", {"exec_max_timeout": "3h"}), "ORG-EXEC-001",
     "Template 'agent' must let a session's command run at most 2 hours and keep at most 8MiB of its output "
     "(exec_max_timeout_s 10800: max value is 7200)."),
    ("exec.yaml", ("templates.agent.session", {"exec_output_limit": "16MiB"}), "ORG-EXEC-001",
     "Template 'agent' must let a session's command run at most 2 hours and keep at most 8MiB of its output "
     "(exec_output_limit_mib 16.0: max value is 8)."),
    ("sizes.yaml", ("templates.agent.limits.memory", "512MiB"), "ORG-SIZE-001",
     "Template 'agent' must have 1-16 CPUs and 1-64GiB of memory (memory_mib 512: min value is 1024)."),
    ("ports.yaml", ("templates.agent.ports", [{"port": 8080, "exposure": "public"}, {"port": 9090, "exposure": "public"}]),
     "ORG-PORT-001", "Template 'agent' must expose only port 8080 publicly (public_ports [8080, 9090]: "
     "{1: ['unallowed value 9090']})."),
])
def test_the_example_org_policies_refuse_out_of_range_values_with_their_own_ids(policy, change, rule, message,
                                                                                tmp_path, capsys):
    assert _check(tmp_path, capsys, CLEAN, "--policy", str(POLICIES / policy))[0] == 0
    code, out, _ = _check(tmp_path, capsys, changed(change, ("policy.ceilings", {"memory": "64GiB"})),
                          "--policy", str(POLICIES / policy), "--format", "json")
    mine = [f for f in json.loads(out)["findings"] if f["rule"] == rule]
    assert code == 1 and [f["message"] for f in mine] == [message]


@pytest.mark.parametrize(("exposure", "findings"), [
    ("public", [("ORG-PORT-001", "Template 'agent' must expose only port 8080 publicly (public_ports [8080, 3000]: "
                 "{1: ['unallowed value 3000']})."),
                ("SBX-PORT-001", "Template 'agent' must not serve port(s) 3000 publicly at its URL (allowed: 8080).")]),
    ("host", []),
])
def test_organisation_rules_see_a_url_port_a_public_ingress_serves_as_public(exposure, findings, tmp_path, capsys):
    # The example policy passed a url port 3000 on a public ingress: reachable from anywhere, it is a public port.
    data = changed(("hosts.local.ingress", {"domain": "sb.example.com", "exposure": exposure}),
                   ("templates.agent.ports", [{"port": 8080, "exposure": "public"},
                                              {"port": 3000, "exposure": "url", "name": "web"}]))
    code, out, _ = _check(tmp_path, capsys, data, "--policy", str(POLICIES / "ports.yaml"), "--format", "json")
    assert (code, [(f["rule"], f["message"]) for f in json.loads(out)["findings"]]) == (1 if findings else 0, findings)


def test_a_gpu_ceiling_as_data(tmp_path, capsys):
    data = changed(("templates.agent.limits.gpus", {"count": 12}), ("policy.ceilings", {"gpus": 16}),
                   ("hosts.local.capacity.gpus", [{"type": "nvidia-l4", "count": 16}]))
    code, out, _ = _check(tmp_path, capsys, data, "--policy", str(POLICIES / "gpus.yaml"), "--format", "json")
    assert code == 1 and [f["message"] for f in json.loads(out)["findings"]] == [
        "Template 'agent' must request at most 8 GPUs (gpus 12: max value is 8)."]


def _rule(rule_id: str = "ORG-A-001", message: str = "m", schema: str = "{cpus: {max: 4}}") -> str:
    """One rule of a policy file: its ID on line 2 (column 9), its message on line 7 (column 14)."""
    return (f"  - id: {rule_id}\n    name: a\n    applies_to: template\n    severity: error\n"
            f"    description: Checks whether a.\n    message: {json.dumps(message)}\n    remediation: r\n"
            f"    schema: {schema}\n")


PLACEHOLDER_FIX = ("the only placeholder is {name} (the name of the template, pool or host at fault); write a literal "
                   "brace as '{{' or '}}'")


@pytest.mark.parametrize(("text", "expected"), [
    ("rules: [{id: X}]\n", "policy.yaml:1:9: $.rules[0].applies_to: required field"),
    ("rules:\n" + _rule(schema="{memroy_mib: {max: 1}}"),
     "policy.yaml:9:14: $.rules[0].schema.memroy_mib: 'memroy_mib' is not a field of a template; use one of "),
    ("rules: [\n", "policy.yaml:2:1"),
    ("rules:\n" + _rule(message="Template '{name}' must fit {foo}"),
     f"policy.yaml:7:14: $.rules[0].message: '{{foo}}' is not a placeholder of a message: {PLACEHOLDER_FIX}\n"),
    ("rules:\n" + _rule(message="Template {name} must use {braces"),
     "policy.yaml:7:14: $.rules[0].message: 'Template {name} must use {braces': expected '}' before end of string; "
     f"{PLACEHOLDER_FIX}\n"),
    ("rules:\n" + _rule(message="Template {0} is too big"),
     f"policy.yaml:7:14: $.rules[0].message: '{{0}}' is not a placeholder of a message: {PLACEHOLDER_FIX}\n"),
    ("rules:\n" + _rule("SBX-PRIV-001"),
     "policy.yaml:2:9: $.rules[0].id: rule ID 'SBX-PRIV-001' is a built-in rule's (no-privileged); give the "
     "organisation's rule its own ID\n"),
    ("rules:\n" + _rule("ORG-A-001") + _rule("ORG-A-001"),
     "policy.yaml:10:9: $.rules[1].id: rule ID 'ORG-A-001' is declared twice\n"),
    ("rules:\n" + _rule() + "config:\n  public_ports: [8080, 99999]\n",
     "policy.yaml:11:24: $.config.public_ports[1]: integer 99999: Input should be less than or equal to 65535\n"),
    ("rules:\n" + _rule() + "config:\n  ceilings: {cpu: 4}\n",
     "policy.yaml:11:14: $.config.ceilings.cpu: unknown setting 'cpu'; use one of cpus, memory, pids, max_lifetime, "
     "gpus\n"),
    ("rules:\n" + _rule() + "config:\n  severity: {SBX-PRIV-001: never}\n",
     "policy.yaml:11:28: $.config.severity.SBX-PRIV-001: string 'never': Input should be 'error', 'warning' or "
     "'off'\n"),
], ids=["required", "unknown-field", "unparsable", "unknown-placeholder", "lone-brace", "positional-placeholder",
        "built-in-id", "id-twice", "bad-config-value", "unknown-config-key", "bad-config-severity"])
def test_a_broken_policy_file_gets_located_errors_and_exit_2(text, expected, tmp_path, capsys):
    policy = tmp_path / "policy.yaml"
    policy.write_text(text)
    code, out, err = _check(tmp_path, capsys, CLEAN, "--policy", str(policy))
    assert code == 2 and out == "" and str(policy) in err and "Traceback" not in err
    assert expected in err


def test_a_rule_id_two_policy_files_declare_is_located_in_the_second(tmp_path, capsys):
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("rules:\n" + _rule("ORG-A-001"))
    second.write_text("rules:\n" + _rule("ORG-B-001") + _rule("ORG-A-001"))
    code, out, err = _check(tmp_path, capsys, CLEAN, "--policy", str(first), "--policy", str(second))
    assert code == 2 and "Traceback" not in err
    assert out.splitlines()[0] == (f"{second}:10:9: $.rules[1].id: rule ID 'ORG-A-001' is already declared in "
                                   f"{first}:2:9; give each rule its own ID")


def test_a_message_is_never_formatted_into_a_crash():
    # load_policy_file refuses these; a rule built some other way still shows its message as written.
    for message in ("Template {foo}", "Template {", "Template {0}", "Template {name.upper}"):
        assert message_problem(message) is not None and render_message(message, {"name": "t"}) == message
    assert render_message("Template '{name}' {{x}}", {"name": "t"}) == "Template 't' {x}"


def test_a_message_with_literal_braces_is_shown_with_them(tmp_path, capsys):
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n" + _rule(message="Template '{name}' must have {{at most}} 1 CPU",
                                          schema="{cpus: {max: 1}}"))
    code, out, _ = _check(tmp_path, capsys, CLEAN, "--policy", str(policy), "--format", "json")
    assert code == 1 and [f["message"] for f in json.loads(out)["findings"]] == [
        "Template 'agent' must have {at most} 1 CPU (cpus 2.0: max value is 1)."]


def test_sarif_is_valid_against_the_official_schema(tmp_path, capsys):
    data = changed(("templates.agent.security", {"privileged": True}), ("templates.agent.network.allow_metadata", True),
                   ("policy.suppressions", [{"rule": "SBX-NET-004", "target": "template/agent", "reason": "needs instance credentials"}]))
    code, out, err = _check(tmp_path, capsys, data, "--format", "sarif", "--policy", str(POLICIES / "cpus.yaml"))
    log = json.loads(out)
    Draft4Validator(SARIF_SCHEMA).validate(log)
    run = log["runs"][0]
    ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert "SBX-PRIV-001" in ids and "ORG-CPU-001" in ids and "SBX-POL-001" in ids
    results = {r["ruleId"]: r for r in run["results"]}
    assert results["SBX-PRIV-001"]["level"] == "error"
    assert results["SBX-PRIV-001"]["locations"][0]["physicalLocation"]["region"]["startLine"] > 1
    assert results["SBX-NET-004"]["suppressions"] == [{"kind": "inSource", "justification": "needs instance credentials"}]
    assert code == 1 and err.strip() == "1 error, 0 warnings, 1 suppressed"


def test_github_annotations(tmp_path, capsys):
    code, out, _ = _check(tmp_path, capsys, changed(("templates.agent.user", "0:0")), "--format", "github")
    assert code == 1
    assert out.startswith("::error file=") and ",title=sandstack SBX-PRIV-003::Template 'agent' must not run as " \
        "root (user 0%3A0)." not in out
    assert "title=sandstack SBX-PRIV-003::Template 'agent' must not run as root (user 0:0). Fix: " in out


def test_base_catches_setup_changed_without_a_version_bump(tmp_path, capsys):
    base = write_spec(tmp_path / "base", CLEAN)
    head = changed(("templates.agent.snapshot.setup", ["pip install requests httpx"]))
    code, out, _ = _check(tmp_path, capsys, head, "--base", str(base), "--format", "json")
    assert code == 1
    assert [f["message"] for f in json.loads(out)["findings"]] == [
        "Template 'agent' must bump snapshot.version: its setup changed."]
    bumped = changed(("templates.agent.snapshot.setup", ["pip install requests httpx"]),
                     ("templates.agent.snapshot.version", "2"))
    assert _check(tmp_path, capsys, bumped, "--base", str(base))[0] == 0


def _repo_with_a_committed_stack(tmp_path: Path) -> Path:
    """A git repository whose HEAD holds the clean stack at stacks/stack.yaml; its work tree changes the setup."""
    repo = tmp_path / "repo"
    write_spec(repo / "stacks", CLEAN, lock=True)
    for args in (("init", "-q", "-b", "main"), ("add", "."), ("commit", "-q", "-m", "base")):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo, check=True,
                       capture_output=True)
    write_spec(repo / "stacks", changed(("templates.agent.snapshot.setup", ["pip install requests httpx"])), lock=True)
    return repo


def test_a_mistyped_git_base_is_an_error_not_a_skipped_comparison(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(_repo_with_a_committed_stack(tmp_path))
    assert main(["check", "stacks/stack.yaml", "--base", "git:HEAD:stacks/stak.yaml"]) == 2
    assert capsys.readouterr().err == (
        "sandstack: --base: git:HEAD:stacks/stak.yaml: stacks/stak.yaml does not exist at HEAD (the base of "
        "stacks/stack.yaml: a missing base is skipped only for a stack new in the diff, whose own path is missing at "
        "the base ref; check the path)\n")
    # The right path compares the snapshots.
    assert main(["check", "stacks/stack.yaml", "--base", "git:HEAD:stacks/stack.yaml", "--format", "json"]) == 1
    assert [f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]] == ["SBX-SNAP-001"]


@pytest.mark.parametrize("base", ["HEAD", "git:HEAD:stacks/new.yaml", "git:HEAD:./stacks/../stacks/new.yaml"])
def test_a_stack_new_in_the_diff_is_checked_without_a_base(base, tmp_path, monkeypatch, capsys):
    repo = _repo_with_a_committed_stack(tmp_path)
    (repo / "stacks" / "new.yaml").write_text((repo / "stacks" / "stack.yaml").read_text())
    (repo / "stacks" / "new.lock").write_text((repo / "stacks" / "stack.lock").read_text())
    monkeypatch.chdir(repo)
    assert main(["check", "stacks/new.yaml", "--base", base, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["findings"] == []


def test_an_invalid_stack_is_reported_like_validate_and_exits_1(tmp_path, capsys):
    code, out, err = _check(tmp_path, capsys, changed(("templates.agent.limits.cpus", "lots")))
    assert code == 1 and "$.templates.agent.limits.cpus" in out + err


def test_a_missing_stack_exits_2(tmp_path, capsys):
    assert main(["check", str(tmp_path / "nope.yaml")]) == 2


def test_the_unused_suppression_rule_is_in_the_generated_index():
    index = (REPO / "docs" / "policy-rules.md").read_text()
    assert "| `SBX-POL-001` | `unused-suppression` | warning | every suppression of a stack matches a finding. |" in index


def test_a_rule_whose_schema_changes_the_view_is_still_normalised_before_it_is_checked(tmp_path, capsys):
    # Schemas without cerberus' normalising rules are checked without its normalisation pass (the organisation
    # rules' time at 1,000 sandboxes); one with them still gets it: here `rename` moves the template's cpus (1)
    # onto memory_mib (512) before `max: 4` is checked, so nothing is found; unnormalised, 512 would be.
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n" + _rule(schema="{cpus: {rename: memory_mib}, memory_mib: {max: 4}}"))
    assert _check(tmp_path, capsys, CLEAN, "--policy", str(policy))[0] == 0
    policy.write_text("rules:\n" + _rule(schema="{memory_mib: {max: 4}}"))
    code, out, _ = _check(tmp_path, capsys, CLEAN, "--policy", str(policy))
    assert code == 1 and "ORG-A-001" in out


def test_a_stack_without_its_address_lock_is_warned_about_once_locked_not(tmp_path, capsys):
    path = write_spec(tmp_path / "spec", CLEAN)
    assert main(["check", str(path), "--format", "json"]) == 0  # a warning
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert [(f["rule"], f["severity"], f["target"], f["path"], f["message"]) for f in findings] == [
        ("SBX-ADDR-001", "warning", "stack", "$.pools",
         "The stack's addresses are not locked: without stack.lock beside it, a new pool whose hashed subnet or "
         "gateway port collides with an existing pool's takes it and replaces that pool's network and sandboxes.")]
    assert main(["check", str(path), "--strict"]) == 1
    assert main(["lock", str(path)]) == 0
    capsys.readouterr()
    assert main(["check", str(path), "--strict", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["findings"] == []
