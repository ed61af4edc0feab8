"""What `sandstack … --help` prints besides the arguments: one sentence on what a command does and examples that
run as written (tests/review/test_cli_help.py parses each example with the real parser,
tests/review/test_cli_examples.py runs each)."""

from __future__ import annotations

import argparse
import textwrap

# Keeps the examples' line breaks; the arguments' help is wrapped as usual.
FORMATTER = argparse.RawDescriptionHelpFormatter


def command(sub: argparse._SubParsersAction, name: str, summary: str, *examples: str,
            details: str = "") -> argparse.ArgumentParser:
    """A subcommand whose `--help` starts with `summary` (also its line in the parent's list) and ends with
    `examples` (each a full command line, `sandstack …`)."""
    return sub.add_parser(name, help=summary, description=sentence(summary) + (f"\n\n{sentence(details)}" if details
                                                                            else ""),
                          epilog=epilog(*examples), formatter_class=FORMATTER)


def sentence(text: str) -> str:
    """`text` as a sentence, wrapped as argparse wraps the rest (the raw formatter keeps it as given)."""
    text = text[:1].upper() + text[1:]
    return textwrap.fill(text if text.endswith(".") else text + ".", 100)


def epilog(*examples: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in examples)

