"""`sandstack validate` output: text, JSON and GitHub annotations; ordering; many files; exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandstack.spec.errors import Diagnostic, SpecError, format_path, render
from sandstack.tooling.cli import main
from tests.spec.helpers import STACKS, edit, fixture_text

MINIMAL = fixture_text("minimal.yaml")
BAD_VERSION = edit(MINIMAL, "version: 1", "version: 2")  # one error at 2:10


@pytest.fixture
def cwd(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_json_format_is_a_list_of_records(cwd, capsys) -> None:
    Path("bad.yaml").write_text(edit(BAD_VERSION, "cpus: 4", "cpus: 0"))
    assert main(["validate", "--format", "json", "bad.yaml"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out) == [
        {"file": "bad.yaml", "line": 2, "column": 10, "path": "$.version", "message": "must be 1, got integer 2",
         "rule": "schema"},
        {"file": "bad.yaml", "line": 7, "column": 13, "path": "$.hosts.local.capacity.cpus",
         "message": "0 is not above 0", "rule": "schema"},
    ]
    assert err == ""


def test_json_format_of_a_valid_file_is_an_empty_list(capsys) -> None:
    assert main(["validate", "--format", "json", str(STACKS / "dev.yaml")]) == 0
    assert capsys.readouterr() == ("[]\n", "")


def test_github_format_is_one_annotation_per_diagnostic(cwd, capsys) -> None:
    Path("bad.yaml").write_text(BAD_VERSION)
    assert main(["validate", "--format", "github", "bad.yaml"]) == 1
    out, err = capsys.readouterr()
    assert out == "::error file=bad.yaml,line=2,col=10,title=sandstack schema::$.version: must be 1, got integer 2\n"
    assert err == ""


def test_github_format_of_a_valid_file_prints_nothing(capsys) -> None:
    assert main(["validate", "--format", "github", str(STACKS / "prod.yaml")]) == 0
    assert capsys.readouterr() == ("", "")


def test_github_format_escapes_properties_and_message() -> None:
    diagnostic = Diagnostic("dir/we,ird:50%.yaml", 3, 7, "$.a", "50% off\r\nnext: a, b", "egress-entry")
    assert diagnostic.github() == (
        "::error file=dir/we%2Cird%3A50%25.yaml,line=3,col=7,title=sandstack egress-entry::"
        "$.a: 50%25 off%0D%0Anext: a, b"
    )


def test_github_format_escapes_a_real_file_name(cwd, capsys) -> None:
    Path("we,ird:50%.yaml").write_text(BAD_VERSION)
    assert main(["validate", "--format", "github", "we,ird:50%.yaml"]) == 1
    assert capsys.readouterr().out == (
        "::error file=we%2Cird%3A50%25.yaml,line=2,col=10,title=sandstack schema::$.version: must be 1, got "
        "integer 2\n"
    )


def test_text_format_and_summary(cwd, capsys) -> None:
    Path("bad.yaml").write_text(BAD_VERSION)
    assert main(["validate", "bad.yaml"]) == 1
    assert capsys.readouterr() == ("bad.yaml:2:10: $.version: must be 1, got integer 2\n",
                                   "1 file checked, 0 valid, 1 invalid (1 error)\n")


def test_valid_files_print_only_the_summary(capsys) -> None:
    assert main(["validate", str(STACKS / "dev.yaml"), str(STACKS / "prod.yaml")]) == 0
    assert capsys.readouterr() == ("", "2 files checked, 2 valid\n")


def test_diagnostics_are_sorted_by_position_not_by_schema_order(cwd, capsys) -> None:
    # `templates` comes first in this file but after `version` in the schema; the output follows the file.
    text = "templates:\n  shell:\n    base_image: Busybox\nhosts:\n  local: 5\nversion: 2\n"
    Path("stack.yaml").write_text(text)
    assert main(["validate", "stack.yaml"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert [line.split(": ", 1)[0] for line in out] == ["stack.yaml:3:17", "stack.yaml:5:10", "stack.yaml:6:10"]


def test_several_files_one_invalid_exit_1_and_valid_one_counted(cwd, capsys) -> None:
    Path("good.yaml").write_text(MINIMAL)
    Path("bad.yaml").write_text(BAD_VERSION)
    assert main(["validate", "good.yaml", "bad.yaml"]) == 1
    assert capsys.readouterr() == ("bad.yaml:2:10: $.version: must be 1, got integer 2\n",
                                   "2 files checked, 1 valid, 1 invalid (1 error)\n")


def test_several_files_are_sorted_by_file_then_position(cwd, capsys) -> None:
    Path("b.yaml").write_text(BAD_VERSION)
    Path("a.yaml").write_text(edit(MINIMAL, "cpus: 4", "cpus: 0"))
    Path("c.yaml").write_text(BAD_VERSION)
    assert main(["validate", "--format", "json", "c.yaml", "b.yaml", "a.yaml"]) == 1
    records = json.loads(capsys.readouterr().out)
    assert [(r["file"], r["line"]) for r in records] == [("a.yaml", 7), ("b.yaml", 2), ("c.yaml", 2)]


def test_an_unreadable_file_among_others_exits_2(cwd, capsys) -> None:
    Path("good.yaml").write_text(MINIMAL)
    Path("bad.yaml").write_text(BAD_VERSION)
    assert main(["validate", "good.yaml", "bad.yaml", "gone.yaml"]) == 2
    assert capsys.readouterr() == (
        "bad.yaml:2:10: $.version: must be 1, got integer 2\ngone.yaml:1:1: $: no such file\n",
        "3 files checked, 1 valid, 1 invalid, 1 unreadable (2 errors)\n",
    )


@pytest.mark.parametrize("argv", [["validate"], ["validate", "--format", "xml", "x.yaml"], [], ["lint", "x.yaml"]])
def test_usage_errors_exit_2(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    assert capsys.readouterr().err.startswith("usage: sandstack")


def test_render_formats_the_same_records() -> None:
    records = [Diagnostic("s.yaml", 1, 2, "$.a", "bad", "schema")]
    assert render(records, "text") == "s.yaml:1:2: $.a: bad"
    assert json.loads(render(records, "json")) == [
        {"file": "s.yaml", "line": 1, "column": 2, "path": "$.a", "message": "bad", "rule": "schema"}]
    assert render(records, "github") == "::error file=s.yaml,line=1,col=2,title=sandstack schema::$.a: bad"


def test_spec_error_sorts_and_deduplicates() -> None:
    later = Diagnostic("s.yaml", 9, 1, "$.b", "later", "schema")
    first = Diagnostic("s.yaml", 2, 5, "$.a", "first", "schema")
    error = SpecError([later, first, later])
    assert error.diagnostics == [first, later]
    assert str(error) == "s.yaml:2:5: $.a: first\ns.yaml:9:1: $.b: later"


@pytest.mark.parametrize(
    ("path", "text"),
    [((), "$"), (("templates", "py", "ports", 0), "$.templates.py.ports[0]"), (("env", "1BAD"), '$.env["1BAD"]'),
     (("labels", "zone.example/x"), '$.labels["zone.example/x"]'), (("a-b", "_c"), "$.a-b._c")],
)
def test_format_path(path: tuple, text: str) -> None:
    assert format_path(path) == text
