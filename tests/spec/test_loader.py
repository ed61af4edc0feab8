"""Hostile files: each gets exactly one located line, a non-zero exit, and never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sandstack.spec import SpecError, check_file
from sandstack.spec import loader
from sandstack.spec.loader import MAX_FILE_BYTES, parse
from sandstack.tooling.cli import main

EMPTY = "the file is empty: a spec is a mapping with 'version', 'hosts' and 'templates'"
TOP = "the top level must be a mapping with 'version', 'hosts' and 'templates', got"
NO_TAGS = "is not allowed: specs use plain YAML without tags"


def _bomb(levels: int = 9) -> str:
    """The billion-laughs file: 9 levels of 9 aliases each, 9**9 (387 million) strings once expanded."""
    lines = ["version: 1", 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    names = "abcdefghij"
    for prev, name in zip(names, names[1:levels]):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


# (id, file content, the one expected line, exit code)
HOSTILE = [
    ("empty", b"", f"stack.yaml:1:1: $: {EMPTY}", 1),
    ("comments-only", b"# nothing here\n   # still nothing\n", f"stack.yaml:1:1: $: {EMPTY}", 1),
    ("document-marker-only", b"---\n", f"stack.yaml:1:1: $: {EMPTY}", 1),
    ("binary", b"version: 1\n\x00\x01\x02ELF",
     "stack.yaml:2:1: $: is a binary file (NUL byte at offset 11), not YAML text", 1),
    ("non-utf8", b"version: 1\ndescription: caf\xe9\n",
     "stack.yaml:2:17: $: is not UTF-8 text: byte 0xe9 cannot be decoded", 1),
    ("control-character", "version: 1\ndescription: \"café \x1b[31m\"\n".encode(),
     "stack.yaml:2:20: $: invalid YAML: character U+001B is not allowed (control characters are not allowed)", 1),
    ("deep-nesting", b"[" * 100_000, "stack.yaml:1:65: $: nesting is deeper than 64 levels", 1),
    ("deep-mapping", b"a: " + b"{a: " * 100_000, "stack.yaml:1:256: $: nesting is deeper than 64 levels", 1),
    ("yaml-bomb", _bomb().encode(),
     "stack.yaml:2:4: $.e[5][5][7][5]: more than 50000 values after expanding aliases (an alias bomb?)", 1),
    ("duplicate-key", b"version: 1\nhosts: {}\ntemplates: {}\nhosts: {}\n",
     "stack.yaml:4:1: $.hosts: duplicate key 'hosts' (first defined at line 2)", 1),
    ("python-tag", b"version: 1\ndescription: !!python/object/apply:os.system ['touch pwned']\n",
     f"stack.yaml:2:14: $.description: tag '!!python/object/apply:os.system' {NO_TAGS}", 1),
    ("python-tag-at-top", b"!!python/object/apply:os.system ['touch pwned']\n",
     f"stack.yaml:1:1: $: tag '!!python/object/apply:os.system' {NO_TAGS}", 1),
    ("local-tag", b"version: !v 1\n", f"stack.yaml:1:10: $.version: tag '!v' {NO_TAGS}", 1),
    ("set-tag", b"version: 1\nhosts: !!set {a, b}\n", f"stack.yaml:2:8: $.hosts: tag '!!set' {NO_TAGS}", 1),
    ("merge-key", b"base: &base {cpus: 1}\nprofiles:\n  small:\n    <<: *base\n",
     "stack.yaml:4:5: $.profiles.small: merge keys ('<<') are not supported: use 'defaults' or 'profiles'", 1),
    ("multiple-documents", b"version: 1\n---\nversion: 2\n",
     "stack.yaml:2:1: $: more than one YAML document: a spec file holds exactly one", 1),
    ("list-at-top", b"- version: 1\n- hosts: {}\n", f"stack.yaml:1:1: $: {TOP} a list", 1),
    ("string-at-top", b"just some words\n", f"stack.yaml:1:1: $: {TOP} a string", 1),
    ("null-at-top", b"null\n", f"stack.yaml:1:1: $: {TOP} null", 1),
    ("integer-key", b"version: 1\n1: one\n", "stack.yaml:2:1: $: key '1' must be a string: quote it", 1),
    ("boolean-key", b"version: 1\nhosts:\n  local:\n    true: 1\n",
     "stack.yaml:4:5: $.hosts.local: key 'true' must be a string: quote it", 1),
    ("list-key", b"version: 1\n? [a, b]\n: c\n",
     "stack.yaml:2:3: $: keys must be plain strings, not lists or mappings", 1),
    ("huge-integer", b"version: 0x" + b"f" * 20_000 + b"\n",
     "stack.yaml:1:10: $.version: integer 0xfffffffffffffffffffffffffffffffffffffffffffffffffffffff... is out of "
     "range: integers in a spec fit in 64 bits", 1),
    ("huge-decimal", b"version: " + b"9" * 5_000 + b"\n",
     "stack.yaml:1:10: $.version: integer 999999999999999999999999999999999999999999999999999999999... is out of "
     "range: integers in a spec fit in 64 bits", 1),
    ("bad-explicit-int", b"version: !!int twelve\n", "stack.yaml:1:10: $.version: 'twelve' is not a valid int", 1),
    ("unclosed-bracket", b"version: 1\nhosts: [\n",
     "stack.yaml:3:1: $: invalid YAML: while parsing a flow node did not find expected node content", 1),
    ("tab-indent", b"version: 1\nhosts:\n\tlocal: {}\n",
     "stack.yaml:3:1: $: invalid YAML: a tab cannot indent YAML: indent with spaces", 1),
    ("tab-after-spaces", b"version: 1\nhosts:\n  local:\n  \tendpoint: x\n",
     "stack.yaml:4:3: $: invalid YAML: a tab cannot indent YAML: indent with spaces", 1),
    ("tab-in-a-block-scalar", b"version: 1\ndescription: |\n\tline\n",
     "stack.yaml:3:1: $: invalid YAML: a tab cannot indent YAML: indent with spaces", 1),
]


LINE = {case[0]: case[2] for case in HOSTILE}


@pytest.mark.parametrize(("content", "line", "code"), [c[1:] for c in HOSTILE], ids=[c[0] for c in HOSTILE])
def test_hostile_file_gets_one_located_line(tmp_path, monkeypatch, capsys, content: bytes, line: str,
                                            code: int) -> None:
    monkeypatch.chdir(tmp_path)
    Path("stack.yaml").write_bytes(content)
    assert main(["validate", "stack.yaml"]) == code
    out, err = capsys.readouterr()
    assert out.splitlines() == [line]
    assert err == "1 file checked, 0 valid, 1 invalid (1 error)\n"
    assert not Path("pwned").exists()


def test_yaml_bomb_is_rejected_in_seconds_not_minutes(tmp_path) -> None:
    # About 0.1 s on an idle machine; expanding the 387 million strings would take many minutes. The bound holds on
    # a busy 2-core machine (it failed at 1.0 s there).
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb())
    start = time.perf_counter()
    diagnostics = check_file(path).diagnostics
    elapsed = time.perf_counter() - start
    assert [d.rule for d in diagnostics] == ["yaml"]
    assert elapsed < 10.0, f"the alias bomb took {elapsed:.2f}s to reject"


def test_deep_nesting_is_rejected_in_seconds_not_minutes() -> None:
    # With libyaml 0.2.6 (PyYAML 6.0.4) the pass behind its nesting limit takes about 0.6 s on this input; a
    # parser that built 100,000 levels, or rescanned them per level, would take minutes.
    start = time.perf_counter()
    with pytest.raises(SpecError) as caught:
        parse("[" * 100_000 + "]" * 100_000, "deep.yaml")
    assert time.perf_counter() - start < 10.0
    assert str(caught.value) == "deep.yaml:1:65: $: nesting is deeper than 64 levels"


class _LibyamlNestingLimit(loader._CoreLoader):
    """A parser that stops as libyaml 0.2.6's does on a line of '[': its scanner, reading ahead of the parser,
    refuses level 1001 before the parser has produced level 65. (Whichever PyYAML runs the suite, this is the
    behaviour of PyYAML 6.0.4; 6.0.3 and older never raise it.)"""

    def check_event(self, *choices):
        mark = yaml.error.Mark("<unicode string>", 1000, 0, 1000, None, None)
        raise yaml.scanner.ScannerError("while increasing flow level", mark, "exceeded maximum nesting depth", mark)


@pytest.mark.parametrize(("text", "line"), [
    ("[" * 100_000, "deep.yaml:1:65: $: nesting is deeper than 64 levels"),
    ("hosts:\n  a: " + "{b: " * 70, "deep.yaml:2:254: $: nesting is deeper than 64 levels"),
    # Not deeper than 64 by sandstack's count: the parser's own limit is reported as it is, never swallowed.
    ("a: [[1]]\n", "deep.yaml:1:1001: $: invalid YAML: while increasing flow level exceeded maximum nesting depth"),
])
def test_a_parser_with_its_own_nesting_limit_still_gets_sandstacks_located_message(monkeypatch, text, line):
    monkeypatch.setattr(loader, "_CoreLoader", _LibyamlNestingLimit)
    monkeypatch.setattr(loader, "_Base", _LibyamlNestingLimit)  # not the pure-Python parser
    with pytest.raises(SpecError) as caught:
        parse(text, "deep.yaml")
    assert str(caught.value) == line


def test_the_installed_pyyaml_gets_the_same_message_for_every_deep_shape() -> None:
    """Flow and block nesting, past libyaml 0.2.6's 1000 levels and under them: one message, one place."""
    shapes = {
        "[" * 5000: (1, 65),
        "{" * 5000: (1, 65),
        "a:\n  " + "[" * 3000: (2, 66),
        "- " * 2000: (1, 129),
        "\n".join(" " * i + "a:" for i in range(1100)): (65, 65),
    }
    for text, (row, column) in shapes.items():
        with pytest.raises(SpecError) as caught:
            parse(text, "deep.yaml")
        assert str(caught.value) == f"deep.yaml:{row}:{column}: $: nesting is deeper than 64 levels", text[:20]


def test_fifty_megabyte_file_is_refused_quickly_by_size(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    with open("big.yaml", "wb") as handle:
        handle.write(b"description: '" + b"x" * (50 * 1024 * 1024) + b"'\n")
    start = time.perf_counter()
    code = main(["validate", "big.yaml"])
    elapsed = time.perf_counter() - start
    assert code == 1
    assert capsys.readouterr().out == "big.yaml:1:1: $: is larger than the 1024 KiB limit for a spec file\n"
    # Only the first MiB is read; parsing 50 MB of YAML would take a minute. (Busy machines: not 1.0 s.)
    assert elapsed < 10.0, f"a 50 MB file took {elapsed:.2f}s to refuse"


def test_file_just_over_the_cap_is_refused_and_just_under_is_parsed(tmp_path) -> None:
    over = tmp_path / "over.yaml"
    over.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    under = tmp_path / "under.yaml"
    under.write_bytes(b"#" * MAX_FILE_BYTES)
    assert [d.rule for d in check_file(over).diagnostics] == ["size"]
    assert [d.message for d in check_file(under).diagnostics] == [EMPTY]


def test_directory_is_unreadable_exit_2(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    Path("stacks").mkdir()
    assert main(["validate", "stacks"]) == 2
    out, err = capsys.readouterr()
    assert out == "stacks:1:1: $: is a directory, not a spec file\n"
    assert err == "1 file checked, 0 valid, 1 unreadable (1 error)\n"


def test_missing_file_is_unreadable_exit_2(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "nope.yaml"]) == 2
    out, err = capsys.readouterr()
    assert out == "nope.yaml:1:1: $: no such file\n"
    assert err == "1 file checked, 0 valid, 1 unreadable (1 error)\n"


def test_utf8_bom_is_accepted(tmp_path) -> None:
    from tests.spec.helpers import fixture_text

    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + fixture_text("minimal.yaml").encode())
    assert check_file(path).diagnostics == []


def test_yaml_1_1_scalars_stay_strings(tmp_path) -> None:
    """`yes`, `on`, `0644` and `12:30` keep YAML 1.2 core meanings, so `yes` is not silently `true`."""
    doc = parse("a: yes\nb: on\nc: 0644\nd: 12:30\ne: 0o17\nf: 0x1F\ng: ~\nh: 1.5e3\ni: .inf\n", "x.yaml")
    assert doc.data == {"a": "yes", "b": "on", "c": 644, "d": "12:30", "e": 15, "f": 31, "g": None, "h": 1500.0,
                        "i": ".inf"}


def test_positions_of_keys_and_values_are_recorded() -> None:
    doc = parse("version: 1\nhosts:\n  local:\n    endpoint: x\n", "x.yaml")
    assert doc.values[("hosts", "local", "endpoint")] == (4, 15)
    assert doc.keys[("hosts", "local", "endpoint")] == (4, 5)
    assert doc.position(("hosts", "local", "capacity", "cpus")) == (4, 5)  # nearest existing ancestor
    assert doc.position(("nowhere",)) == (1, 1)


CONSOLE_SCRIPT = Path(sys.executable).with_name("sandstack")


@pytest.mark.parametrize(
    ("content", "line", "code"),
    [(_bomb().encode(), LINE["yaml-bomb"], 1), (b"version: 1\n\x00\x01\x02ELF", LINE["binary"], 1)],
    ids=["yaml-bomb", "binary"],
)
def test_console_script_reports_hostile_file_without_traceback(tmp_path, content: bytes, line: str,
                                                               code: int) -> None:
    (tmp_path / "stack.yaml").write_bytes(content)
    run = subprocess.run([str(CONSOLE_SCRIPT), "validate", "stack.yaml"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert (run.returncode, run.stdout) == (code, line + "\n")
    assert run.stderr == "1 file checked, 0 valid, 1 invalid (1 error)\n"


def test_console_script_missing_file_exits_2_without_traceback(tmp_path) -> None:
    run = subprocess.run([str(CONSOLE_SCRIPT), "validate", "missing.yaml"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert (run.returncode, run.stdout) == (2, "missing.yaml:1:1: $: no such file\n")
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize(
    ("error", "message"),
    [(PermissionError(13, "Permission denied"), "permission denied"),
     (IsADirectoryError(21, "Is a directory"), "cannot be read: Is a directory"),
     (OSError(5, "Input/output error"), "cannot be read: Input/output error")],
)
def test_unreadable_file_is_exit_2_with_the_reason(tmp_path, monkeypatch, capsys, error: OSError,
                                                   message: str) -> None:
    monkeypatch.chdir(tmp_path)
    Path("locked.yaml").write_text("version: 1\n")
    real_open = os.open

    def refuse(path, *args, **kwargs):
        if os.path.basename(path) == "locked.yaml":
            raise error
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    assert main(["validate", "locked.yaml"]) == 2
    assert capsys.readouterr() == (f"locked.yaml:1:1: $: {message}\n",
                                   "1 file checked, 0 valid, 1 unreadable (1 error)\n")
