"""One `sandstack check` of stack files: validation first, then the built-in and organisation rules, with the
stack's suppressions applied and every finding located in its file."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from sandstack.policy.builtin import RULES, builtin_violations
from sandstack.policy.findings import Finding, Rule, Violation
from sandstack.policy.org import OrgRule, PolicyFile, duplicate_ids, org_violations
from sandstack.spec import check_file
from sandstack.spec.errors import Diagnostic, SpecError, format_path
from sandstack.spec.models import Policy
from sandstack.spec.resolve import ResolvedStack


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    invalid: list[Diagnostic] = field(default_factory=list)  # specs that did not validate
    unreadable: list[Diagnostic] = field(default_factory=list)
    rules: dict[str, Rule] = field(default_factory=dict)  # every rule that ran, by ID

    def active(self) -> list[Finding]:
        return [f for f in self.findings if f.suppressed is None]

    def exit_code(self, strict: bool = False) -> int:
        if self.unreadable:
            return 2
        failing = {"error", "warning"} if strict else {"error"}
        return 1 if self.invalid or any(f.severity in failing for f in self.active()) else 0


def effective_policy(spec: ResolvedStack, files: list[PolicyFile]) -> Policy:
    """The stack's `policy:` with every policy file's `config` over it, setting by setting (the organisation's
    settings win; only theirs may turn a rule off). Both sides are validated models: merging them re-parses
    nothing (a duration read back as seconds is no longer a duration the parser accepts)."""
    policy = spec.spec.policy
    for policy_file in files:
        config = policy_file.config
        policy = policy.model_copy(update={k: getattr(config, k) for k in config.model_fields_set})
    return policy


def _locate(doc, violation: Violation, rule: Rule, severity: str) -> Finding:
    line, column = doc.position(violation.path)
    return Finding(doc.file, line, column, rule.id, severity, violation.target, format_path(violation.path),
                   violation.message, violation.remediation or rule.remediation)


def check_stack(path: str | os.PathLike[str], files: list[PolicyFile], *, base: ResolvedStack | None = None,
                suppressions: bool = True, report: Report | None = None) -> Report:
    report = report or Report()
    result = check_file(path)
    if result.stack is None or result.document is None:
        (report.unreadable if result.unreadable else report.invalid).extend(result.diagnostics)
        return report
    spec, doc = result.stack, result.document
    policy = effective_policy(spec, files)
    org = {o.rule.id: o for policy_file in files for o in policy_file.rules}
    report.invalid.extend(stack_overrides(doc, spec.spec.policy, org))
    rules = {**RULES, **{rule_id: o.rule for rule_id, o in org.items()}}
    report.rules.update(rules)
    # An organisation rule is downgraded or suppressed by policy files only: the stack's own `policy.severity` and
    # `policy.suppressions` (refused above when they name one) apply to built-in rules. A file's `config` setting
    # replaces the stack's, so when a file sets one, the effective setting is the organisation's.
    files_set = set().union(*(f.config.model_fields_set for f in files)) if files else set()
    for violation in builtin_violations(spec, policy, base) + org_violations(spec, files):
        rule = rules[violation.rule]
        own = rule.id in org and "severity" not in files_set
        severity = rule.severity if own else policy.severity.get(rule.id, rule.severity)
        if severity == "off":
            continue
        report.findings.append(_locate(doc, violation, rule, severity))
    if suppressions:
        _suppress(report, doc, policy, org={} if "suppressions" in files_set else org,
                  stack_owned="suppressions" not in files_set)
    report.findings.sort()
    return report


def stack_overrides(doc, own: Policy, org: dict[str, OrgRule]) -> list[Diagnostic]:
    """A stack's `policy.severity` or `policy.suppressions` naming an organisation rule, located at the ID: the
    stack CI checks must not weaken the policy CI checks it against."""
    out = []
    for rule_id in own.severity:
        if rule_id in org:
            out.append(doc.diagnostic(("policy", "severity", rule_id), f"{_org_rule(org[rule_id])}: a stack cannot "
                                      "change its severity; only a policy file's `config.severity` can (a stack's "
                                      "`policy.severity` may name built-in rules only)", "policy", key=True))
    for index, s in enumerate(own.suppressions):
        if s.rule in org:
            out.append(doc.diagnostic(("policy", "suppressions", index, "rule"), f"{_org_rule(org[s.rule])}: a stack "
                                      "cannot suppress it; only a policy file's `config.suppressions` can (fix the "
                                      "finding, or ask the policy's owners)", "policy"))
    return out


def _org_rule(org: OrgRule) -> str:
    return f"{org.rule.id} is organisation rule '{org.rule.name}' ({org.rule.source}:{org.at[0]}:{org.at[1]})"


def _suppress(report: Report, doc, policy: Policy, *, org: dict[str, OrgRule], stack_owned: bool) -> None:
    """Apply the effective suppressions, except a stack's of an organisation rule (`org`). Unused ones are reported
    when they are the stack's (a policy file's are meant for many stacks, and are not in this file)."""
    used: set[int] = set()
    for i, finding in enumerate(report.findings):
        if finding.file != doc.file:
            continue
        for index, s in enumerate(policy.suppressions):
            target = s.target.replace("templates/", "template/").replace("pools/", "pool/").replace("hosts/", "host/")
            if s.rule == finding.rule and target == finding.target and s.rule not in org:
                report.findings[i] = replace(finding, suppressed=s.reason)
                used.add(index)
    for index, s in enumerate(policy.suppressions):
        if stack_owned and index not in used and s.rule not in org:
            line, column = doc.position(("policy", "suppressions", index))
            rule = RULES["SBX-POL-001"]
            severity = policy.severity.get(rule.id, rule.severity)
            if severity == "off":
                continue
            report.findings.append(Finding(doc.file, line, column, rule.id, severity, s.target,
                                           format_path(("policy", "suppressions", index)),
                                           f"Suppression of {s.rule} on {s.target} matches no finding.",
                                           rule.remediation))


def check(paths: list[str], files: list[PolicyFile], *, base: dict[str, ResolvedStack] | None = None,
          suppressions: bool = True) -> Report:
    report = Report()
    report.unreadable.extend(duplicate_ids(files))
    if report.unreadable:
        return report
    for path in paths:
        check_stack(path, files, base=(base or {}).get(path), suppressions=suppressions, report=report)
    return report


__all__ = ["Report", "SpecError", "check", "check_stack", "effective_policy"]
