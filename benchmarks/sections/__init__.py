"""The benchmark sections, in the order they run. Each module has `TITLE` and `run(ctx) -> SectionResult`.

Modules are imported only when their section runs: the Docker sections import the engine harness from
`tests/engine`, and a run of the others (`--only validate,program,preview,check`) must not.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Section:
    name: str
    docker: bool       # needs a Docker daemon (and the test images, built locally)
    issue_item: str    # where its goals come from (issue 13)

    def module(self):
        return importlib.import_module(f"benchmarks.sections.{self.name}")


SECTIONS = {s.name: s for s in (
    Section("validate", False, "1"),
    Section("program", False, "2"),
    Section("preview", False, "2"),
    Section("check", False, "3"),
    Section("start", True, "4"),
    Section("gateway", True, "5"),
    Section("deploy", True, "6"),
    Section("runtime", True, "issue 12"),
    Section("ondemand", True, "issue 22"),
    Section("concurrency", True, "issue 22"),
    Section("hosts", True, "issue 24"),
    Section("streams", True, "issue 23"),
    Section("live", True, "issue 36"),
    Section("sizes", True, "issue 39"),
    Section("ssh", True, "issue 39"),
    Section("snapstore", True, "issue 39"),
)}
WITHOUT_DOCKER = [s.name for s in SECTIONS.values() if not s.docker]


def select(only: str | None) -> list[Section]:
    """`--only a,b` → those sections in run order; unknown names are an error naming the known ones."""
    if not only:
        return list(SECTIONS.values())
    wanted = [name.strip() for name in only.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown section(s) {', '.join(unknown)}; known: {', '.join(SECTIONS)}")
    return [s for s in SECTIONS.values() if s.name in wanted]
