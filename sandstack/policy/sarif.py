"""SARIF 2.1.0 for code scanning: one run, the rules that ran (ID, name, description, help, default level)
and a result per finding with its location; suppressed findings carry an `inSource` suppression."""

from __future__ import annotations

import json
from pathlib import Path

from sandstack.policy.runner import Report

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _uri(file: str) -> str:
    path = Path(file)
    return path.as_posix() if not path.is_absolute() else path.as_uri()


def to_sarif(report: Report, version: str) -> str:
    rule_ids = sorted(report.rules)
    index = {rid: i for i, rid in enumerate(rule_ids)}
    rules = [{
        "id": rid, "name": r.name,
        "shortDescription": {"text": r.description},
        "fullDescription": {"text": r.description},
        "help": {"text": r.remediation, "markdown": r.remediation},
        "defaultConfiguration": {"level": r.severity},
        "properties": {"source": r.source},
    } for rid in rule_ids for r in [report.rules[rid]]]
    results = []
    for f in sorted(report.findings):
        result = {
            "ruleId": f.rule, "ruleIndex": index[f.rule], "level": f.severity,
            "message": {"text": f"{f.message} Fix: {f.remediation}"},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": _uri(f.file)},
                "region": {"startLine": f.line, "startColumn": f.column}},
                "logicalLocations": [{"name": f.target, "fullyQualifiedName": f.path, "kind": "object"}]}],
        }
        if f.suppressed is not None:
            result["suppressions"] = [{"kind": "inSource", "justification": f.suppressed}]
        results.append(result)
    for d in report.invalid + report.unreadable:
        results.append({"ruleId": f"validate/{d.rule}", "level": "error", "message": {"text": d.message},
                        "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(d.file)},
                                                            "region": {"startLine": d.line, "startColumn": d.column}}}]})
    log = {"$schema": SCHEMA, "version": "2.1.0", "runs": [{
        "tool": {"driver": {"name": "sandstack", "version": version, "rules": rules}},
        "results": results,
    }]}
    return json.dumps(log, indent=2, sort_keys=True) + "\n"
