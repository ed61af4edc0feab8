"""`sandstack … --help`: every command says what it does in a sentence and shows examples that parse (and run:
tests/review/test_cli_examples.py); every flag and argument has help text; the runtime CLI (`sandstack sandbox …`)
names the same thing the same way everywhere."""

from __future__ import annotations

import argparse
import shlex

import pytest

from sandstack.tooling.cli import build_parser
from sandstack.tooling.sandbox_cli import cmd_archive

HIDDEN = {"legacy_output"}  # `sandbox archive HOST/SANDBOX FILE`, the form before -o: accepted, not advertised


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("sandstack",)):
    out = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            listed = {a.dest: a.help for a in action._choices_actions}
            for name, child in action.choices.items():
                assert listed.get(name), f"{' '.join(path)} lists {name} without a sentence"
                out += _parsers(child, (*path, name))
    return out


PARSERS = _parsers(build_parser())
IDS = [" ".join(path) for path, _ in PARSERS]


def test_every_command_is_walked():
    assert {"sandstack diff", "sandstack sandbox exec", "sandstack sandbox archive", "sandstack generate",
            "sandstack lock"} <= set(IDS)
    assert len(PARSERS) == 1 + 8 + 15  # the root, its eight commands (status, lock too), the sandbox's fifteen (shell)


@pytest.mark.parametrize(("path", "parser"), PARSERS, ids=IDS)
def test_every_flag_and_argument_has_help_text(path, parser):
    missing = [a.option_strings[-1] if a.option_strings else a.dest for a in parser._actions
               if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
               and (not a.help or a.help == argparse.SUPPRESS) and a.dest not in HIDDEN]
    assert missing == [], f"{' '.join(path)}: no help text for {missing}"
    assert all(len(a.help.split()) >= 3 for a in parser._actions if a.help and a.help != argparse.SUPPRESS)


@pytest.mark.parametrize(("path", "parser"), PARSERS, ids=IDS)
def test_every_command_has_a_sentence_and_examples_that_parse(path, parser):
    assert parser.description and parser.description.rstrip().endswith("."), f"{' '.join(path)}: no sentence"
    assert parser.epilog and parser.epilog.startswith("examples:\n"), f"{' '.join(path)}: no examples"
    examples = [line.strip() for line in parser.epilog.splitlines()[1:]]
    assert examples and all(e.startswith(" ".join(path)) for e in examples), examples
    for example in examples:
        argv = shlex.split(example)[1:]
        args = build_parser().parse_args(argv)  # exits (SystemExit 2) on an example the parser refuses
        assert callable(args.func), example
    assert parser.format_help().count("examples:") == 1


def test_the_runtime_cli_names_the_same_thing_the_same_way():
    names: dict[str, set[str]] = {}
    sandbox = [(path, p) for path, p in PARSERS if path[:2] == ("sandstack", "sandbox") and len(path) == 3]
    for _, parser in sandbox:
        for a in parser._actions:
            if a.dest not in HIDDEN and not isinstance(a, argparse._HelpAction):
                names.setdefault(a.dest, set()).add(a.metavar or "/".join(a.option_strings))
    assert {dest: forms for dest, forms in names.items() if len(forms) > 1} == {}
    assert names["sandbox"] == {"HOST/SANDBOX"} and names["host"] == {"HOST"} and names["pool"] == {"POOL"}
    assert names["session"] == {"SESSION"} and names["path"] == {"PATH"} and names["output"] == {"FILE"}
    outputs = {path[-1]: a.option_strings for path, p in sandbox for a in p._actions if a.dest == "output"}
    assert outputs == {"get": ["-o", "--output"], "archive": ["-o", "--output"]}


class _Sandbox:
    def archive(self, fmt: str) -> bytes:
        return f"archive as {fmt}".encode()


class _Client:
    def sandbox(self, ref: str) -> _Sandbox:
        assert ref == "local/sandstack-dev-python-0"
        return _Sandbox()


def test_archive_writes_to_o_the_old_positional_file_or_stdout(tmp_path, capsysbinary):
    parser = build_parser()
    for argv, target in ((["-o", str(tmp_path / "a.tar.gz")], tmp_path / "a.tar.gz"),
                         ([str(tmp_path / "b.tar.gz")], tmp_path / "b.tar.gz")):
        args = parser.parse_args(["sandbox", "archive", "local/sandstack-dev-python-0", *argv])
        assert cmd_archive(_Client(), args) == 0 and target.read_bytes() == b"archive as tar.gz"
    args = parser.parse_args(["sandbox", "archive", "local/sandstack-dev-python-0", "--format", "zip"])
    assert cmd_archive(_Client(), args) == 0 and capsysbinary.readouterr().out == b"archive as zip"
    args = parser.parse_args(["sandbox", "archive", "local/sandstack-dev-python-0", "x.zip", "-o", "y.zip"])
    with pytest.raises(ValueError, match=r"^give the archive's file once: -o FILE$"):
        cmd_archive(_Client(), args)
