"""`sandstack check` output: text (grouped by file, by line; coloured on a terminal), json, GitHub annotations
and SARIF 2.1.0 (`sarif`). Messages never carry a suspected secret: rules say where, not what."""

from __future__ import annotations

import json
from itertools import groupby

from rich.console import Console

from sandstack.policy.findings import Finding
from sandstack.policy.runner import Report
from sandstack.spec.errors import _gh_escape

STYLE = {"error": "red", "warning": "yellow"}


def summary(report: Report) -> str:
    active = report.active()
    errors = sum(f.severity == "error" for f in active)
    warnings = sum(f.severity == "warning" for f in active)
    suppressed = len(report.findings) - len(active)
    parts = [f"{errors} error{'s' * (errors != 1)}", f"{warnings} warning{'s' * (warnings != 1)}",
             f"{suppressed} suppressed"]
    if report.invalid:
        parts.insert(0, f"{len(report.invalid)} validation error{'s' * (len(report.invalid) != 1)}")
    if report.unreadable:
        parts.insert(0, f"{len(report.unreadable)} unreadable input{'s' * (len(report.unreadable) != 1)}")
    return ", ".join(parts)


def to_text(report: Report, console: Console) -> None:
    for d in report.unreadable + report.invalid:
        console.print(d.text(), style="red", markup=False, highlight=False)
    for file, items in groupby(sorted(report.findings), key=lambda f: f.file):
        console.print(file, style="bold", markup=False, highlight=False)
        for f in items:
            if f.suppressed is not None:
                console.print(f"  {f.line}:{f.column} suppressed {f.rule}: {f.message} (reason: {f.suppressed})",
                              style="dim", markup=False, highlight=False)
                continue
            console.print(f"  {f.line}:{f.column} ", end="", markup=False, highlight=False)
            console.print(f"{f.severity} {f.rule}", style=STYLE[f.severity], end="", markup=False, highlight=False)
            console.print(f": {f.message}\n      fix: {f.remediation}", markup=False, highlight=False)
    console.print(summary(report), style="red" if report.exit_code() else "green", markup=False, highlight=False)


def _finding_json(f: Finding) -> dict:
    return {"file": f.file, "line": f.line, "column": f.column, "rule": f.rule, "severity": f.severity,
            "target": f.target, "path": f.path, "message": f.message, "remediation": f.remediation,
            "suppressed": f.suppressed}


def to_json(report: Report) -> str:
    data = {"findings": [_finding_json(f) for f in sorted(report.findings)],
            "invalid": [d.as_dict() for d in report.invalid], "unreadable": [d.as_dict() for d in report.unreadable],
            "summary": summary(report)}
    return json.dumps(data, sort_keys=True, indent=2) + "\n"


def to_github(report: Report) -> str:
    lines = [d.github() for d in report.unreadable + report.invalid]
    for f in sorted(report.active()):
        title = _gh_escape(f"sandstack {f.rule}").replace(":", "%3A").replace(",", "%2C")
        file = _gh_escape(f.file).replace(":", "%3A").replace(",", "%2C")
        lines.append(f"::{f.severity} file={file},line={f.line},col={f.column},title={title}::"
                     f"{_gh_escape(f.message + ' Fix: ' + f.remediation)}")
    return "\n".join(lines) + ("\n" if lines else "")
