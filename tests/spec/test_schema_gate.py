"""The schema gate (sandstack/spec/schema_gate.py): a fast yes/no that never calls valid what jsonschema refuses, so
`sandstack validate` of a valid spec needs neither jsonschema nor rich."""

from __future__ import annotations

import subprocess
import sys

import jsonschema
import jsonschema_rs
import pytest

from sandstack.spec.loader import parse
from sandstack.spec.schema import published_schema
from sandstack.spec.schema_gate import schema_valid
from tests.spec.helpers import FIXTURES, STACKS, edit, fixture_text
from tests.spec.test_schema_errors import CASES, with_template_field

MINIMAL = fixture_text("minimal.yaml")


def _data(text: str) -> object:
    return parse(text, "stack.yaml").data


def _jsonschema_valid(data: object) -> bool:
    return not list(jsonschema.Draft202012Validator(published_schema()).iter_errors(data))


@pytest.mark.parametrize("text", [c[2] for c in CASES], ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_the_gate_agrees_with_jsonschema_on_every_schema_error_case(text: str) -> None:
    """Each case of the schema messages (a few are the models' own errors, past a valid schema)."""
    data = _data(text)
    assert schema_valid(data) is _jsonschema_valid(data)


@pytest.mark.parametrize("path", sorted(STACKS.glob("*.yaml")) + [FIXTURES / "minimal.yaml", FIXTURES / "rules.yaml"],
                         ids=lambda p: p.name)
def test_the_gate_passes_the_valid_specs(path) -> None:
    data = parse(path.read_text(encoding="utf-8"), path.name).data
    assert _jsonschema_valid(data)
    assert schema_valid(data) is True


# U+001C (a file separator) is whitespace to Python's `\s`, not to ECMA-262's: `reason` must hold a non-blank
# character (pattern '\S'), which jsonschema, searching with Python's `re`, finds none of.
SEPARATOR_REASON = edit(MINIMAL, "templates:", 'policy:\n  suppressions:\n    - rule: SBX-PRIV-001\n'
                        '      target: stack\n      reason: "\\x1c"\ntemplates:')


def test_patterns_are_searched_as_jsonschema_searches_them() -> None:
    data = _data(SEPARATOR_REASON)
    assert data["policy"]["suppressions"][0]["reason"] == "\x1c"
    assert not _jsonschema_valid(data)
    # jsonschema-rs's own `pattern` (ECMA-262) calls it valid: the gate must not.
    assert jsonschema_rs.Draft202012Validator(published_schema()).is_valid(data) is True
    assert schema_valid(data) is False


def test_a_trailing_newline_passes_as_python_re_lets_it() -> None:
    """Python's `$` matches before a final newline, ECMA's does not: the gate follows jsonschema."""
    data = _data(with_template_field('    user: "agent\\n"'))
    assert _jsonschema_valid(data)
    assert schema_valid(data) is True


VALIDATE = """
import sys
from sandstack.tooling.cli import main
code = main(["validate", sys.argv[1]])
print(code, " ".join(sorted(m for m in sys.modules if m.split(".")[0] in ("jsonschema", "rich"))))
"""


@pytest.mark.parametrize("stack", ["dev.yaml", "prod.yaml"])
def test_validating_a_valid_spec_imports_neither_jsonschema_nor_rich(tmp_path, stack: str) -> None:
    run = subprocess.run([sys.executable, "-c", VALIDATE, str(STACKS / stack)], capture_output=True, text=True,
                         cwd=tmp_path, env={"PYDANTIC_DISABLE_PLUGINS": "__all__", "PATH": "/usr/bin"})
    assert run.stdout.split(" ", 1) == ["0", "\n"], run.stderr
    assert run.stderr == "1 file checked, 1 valid\n"


def test_an_invalid_spec_still_gets_jsonschemas_explained_errors(tmp_path) -> None:
    spec = tmp_path / "stack.yaml"
    spec.write_text(with_template_field("    runtime: kata"), encoding="utf-8")
    (tmp_path / "agent.py").write_text((FIXTURES / "agent.py").read_text())
    run = subprocess.run([sys.executable, "-c", VALIDATE, "stack.yaml"], capture_output=True, text=True,
                         cwd=tmp_path, env={"PYDANTIC_DISABLE_PLUGINS": "__all__", "PATH": "/usr/bin"})
    assert run.stdout.splitlines()[0] == ("stack.yaml:14:14: $.templates.shell.runtime: 'kata' is not allowed; "
                                          "use one of 'runc', 'runsc'")
    assert run.stdout.splitlines()[1].startswith("1 jsonschema")
    assert run.stderr == "1 file checked, 0 valid, 1 invalid (1 error)\n"


def test_ctrl_c_during_the_gate_is_raised_after_it_not_swallowed(monkeypatch) -> None:
    """A SIGINT that lands in the pattern keyword's Python code, which jsonschema-rs calls from Rust: the interrupt
    comes out as a KeyboardInterrupt once the gate returns (jsonschema-rs swallowed it as "invalid", or printed it
    as "Exception ignored" with a traceback, and the command went on)."""
    import os
    import signal
    import threading

    from sandstack.spec import schema_gate

    search = schema_gate._PythonPattern.validate
    sent = []

    def interrupted(self, instance):
        if not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)
        return search(self, instance)

    monkeypatch.setattr(schema_gate._PythonPattern, "validate", interrupted)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    # Another thread, alive during the call, as a test runner or a host program has: the kernel may give it the
    # signal, and Python still runs the handler in the main thread, inside the Rust call's Python code.
    other = threading.Event()
    waiter = threading.Thread(target=other.wait, daemon=True)
    waiter.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            schema_valid(_data(MINIMAL))
    finally:
        signal.signal(signal.SIGINT, previous)
        other.set()
        waiter.join()
    assert sent == [True]
    assert schema_valid(_data(MINIMAL))  # and the gate's answer is as before once nothing interrupts it
