"""Field coverage: which test applied which mapped input, on the engine and in dry recording.

Derived from the mapping tables (tables.MAPPINGS: every supported field) and the field uses the
mocks record during the session (testbed/provider/mocks.py FIELD_USE), plus the fields tests claim to prove
(`harness.proves("Container.memory")`). Written as Markdown at the end of a pytest session, to
$SANDSTACK_HARNESS_COVERAGE if set (CI: testbed/harness/COVERAGE.md), else .sandstack/harness-coverage.md.
"""

from __future__ import annotations

import difflib
import os
import threading
from pathlib import Path
from typing import Iterable

from testbed.provider.tables import MAPPINGS
from testbed.provider import mocks as recording_mocks

CLAIMS: dict[str, set[str]] = {}   # field ("Container.memory") -> tests claiming to prove it
_LOCK = threading.Lock()
BEGIN, END = "<!-- BEGIN harness coverage (generated) -->", "<!-- END harness coverage -->"


def all_fields() -> dict[str, tuple[str, str]]:
    """"Title.path" -> (type token, path) for every field the tables map."""
    out = {}
    for token, mapping in MAPPINGS.items():
        for path in mapping.supported_fields():
            out[f"{mapping.title}.{path}"] = (token, path)
    return out


def claim(test: str, fields: Iterable[str]) -> None:
    known = all_fields()
    for name in fields:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=3)
            raise KeyError(f"unknown harness field {name!r} (form 'Container.memory'); did you mean {close}?")
        with _LOCK:
            CLAIMS.setdefault(name, set()).add(test or "<no test>")


def tests_using(field: str, backend: str = "engine") -> set[str]:
    token, path = all_fields()[field]
    return set(recording_mocks.FIELD_USE.get((token, path), {}).get(backend, set()))


def unproven_claims(test: str) -> list[str]:
    """Fields `test` claimed but never applied to the engine."""
    return sorted(f for f, tests in CLAIMS.items() if test in tests and test not in tests_using(f))


def render() -> str:
    rows = []
    engine_count = 0
    fields = all_fields()
    for name, (token, path) in fields.items():
        uses = recording_mocks.FIELD_USE.get((token, path), {})
        engine, dry = sorted(uses.get("engine", ())), sorted(uses.get("dry", ()))
        engine_count += bool(engine)
        mapping = MAPPINGS[token]
        top = mapping.by_name[path.split(".")[0]]
        provers = sorted(CLAIMS.get(name, ()))
        rows.append(f"| `{name}` | {top.change} | {_tests(engine)} | {_tests(dry)} | {_tests(provers, len(provers))} |")
    header = ("| Field | Change | Applied on the engine by | Recorded (dry) by | Proven by (`harness.proves`) |\n"
              "|---|---|---|---|---|")
    return (f"# Engine harness coverage\n\nGenerated at the end of a pytest session by testbed/harness/coverage.py; "
            f"do not edit. {engine_count} of {len(fields)} mapped fields were applied to the Docker engine.\n\n"
            f"{BEGIN}\n{header}\n" + "\n".join(rows) + f"\n{END}\n")


def _tests(tests: list[str], limit: int = 3) -> str:
    # Node ids without the common prefix; long lists are cut so the table stays readable.
    names = [t.split("tests/", 1)[-1] for t in tests]
    more = f"<br>(+{len(names) - limit} more)" if len(names) > limit else ""
    return "<br>".join(names[:limit]) + more or "—"


def export() -> dict:
    """What this process recorded, in plain lists (pytest-xdist sends a worker's records to the controller)."""
    with _LOCK:
        return {"use": [[token, path, backend, sorted(tests)] for (token, path), uses in recording_mocks.FIELD_USE.items()
                        for backend, tests in uses.items()],
                "claims": [[name, sorted(tests)] for name, tests in CLAIMS.items()]}


def merge(recorded: dict) -> None:
    """Adds another process's `export()` to this one's records."""
    with _LOCK:
        for token, path, backend, tests in recorded.get("use", ()):
            recording_mocks.FIELD_USE.setdefault((token, path), {}).setdefault(backend, set()).update(tests)
        for name, tests in recorded.get("claims", ()):
            CLAIMS.setdefault(name, set()).update(tests)


def summary() -> str:
    fields = all_fields()
    applied = [f for f in fields if tests_using(f)]
    missing = [f for f in fields if not tests_using(f) and not tests_using(f, "dry")]
    return (f"engine harness: {len(applied)}/{len(fields)} mapped fields applied to the engine this session; "
            f"{len(missing)} exercised by no test at all")


def write(root: Path) -> Path | None:
    """Writes the report when the session recorded any field use; returns its path."""
    if not recording_mocks.FIELD_USE:
        return None
    target = Path(os.environ.get("SANDSTACK_HARNESS_COVERAGE") or root / ".sandstack" / "harness-coverage.md")
    if not target.is_absolute():
        target = root / target
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render())
    return target


# --- which fields the plan sets: the part of the table the engine must prove ------------------------------------------

def plan_fields(plan) -> dict[str, set[str]]:
    """"Title.path" -> the node keys setting it, for every mapped input a StackPlan's nodes set (what the program
    registers: the differential test holds them equal)."""
    from sandstack.plan.tree import After, Ref, Secret
    from testbed.provider.wire import to_wire

    def leaf(value):
        if isinstance(value, After):
            return value.text
        return "<known after apply>" if isinstance(value, Ref) else "<secret>" if isinstance(value, Secret) else value

    out: dict[str, set[str]] = {}
    for key, node in plan.nodes.items():
        mapping = MAPPINGS.get(node.type)
        if mapping is None:  # components and the provider: no engine fields
            continue
        for path in mapping.check(key, to_wire(dict(node.inputs), leaf)):
            out.setdefault(f"{mapping.title}.{path}", set()).add(key)
    return out
