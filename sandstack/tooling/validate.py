"""`sandstack validate`: every layer of validation over many files, all errors at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the spec layer is imported when files are validated: the CLI reads the exit codes first
    from sandstack.spec.errors import Diagnostic

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


@dataclass
class Report:
    diagnostics: list[Diagnostic] = field(default_factory=list)
    valid: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.unreadable:
            return EXIT_USAGE
        return EXIT_INVALID if self.invalid else EXIT_OK


def validate_files(paths: list[str]) -> Report:
    from sandstack.spec import check_file

    report = Report()
    for path in paths:
        result = check_file(path)
        report.diagnostics.extend(result.diagnostics)
        if result.unreadable:
            report.unreadable.append(path)
        elif result.diagnostics:
            report.invalid.append(path)
        else:
            report.valid.append(path)
    report.diagnostics.sort()
    return report
