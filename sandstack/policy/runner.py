"""One `sandstack check` of stack files: validation first, then the built-in and organisation rules, with the
stack's suppressions applied and every finding located in its file."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from sandstack.policy.builtin import RULES, builtin_violations
from sandstack.policy.findings import Finding, Rule, Violation
from sandstack.policy.org import PolicyFile, duplicate_ids, org_violations
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
    rules = dict(RULES)
    for policy_file in files:
        rules.update({o.rule.id: o.rule for o in policy_file.rules})
    report.rules.update(rules)
    for violation in builtin_violations(spec, policy, base) + org_violations(spec, files):
        rule = rules[violation.rule]
        severity = policy.severity.get(rule.id, rule.severity)
        if severity == "off":
            continue
        report.findings.append(_locate(doc, violation, rule, severity))
    if suppressions:
        _suppress(report, doc, policy)
    report.findings.sort()
    return report


def _suppress(report: Report, doc, policy: Policy) -> None:
    used: set[int] = set()
    for i, finding in enumerate(report.findings):
        if finding.file != doc.file:
            continue
        for index, s in enumerate(policy.suppressions):
            target = s.target.replace("templates/", "template/").replace("pools/", "pool/").replace("hosts/", "host/")
            if s.rule == finding.rule and target == finding.target:
                report.findings[i] = replace(finding, suppressed=s.reason)
                used.add(index)
    for index, s in enumerate(policy.suppressions):
        if index not in used:
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
