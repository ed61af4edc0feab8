"""Safe YAML loading that keeps the line and column of every key and value.

Hostile files are the normal case for a validator that runs in CI on pull requests, so:
- the path must be a regular file (a named pipe or a device would make the read wait forever) and the file is
  capped in size before it is parsed: both by sandstack.files, the reader of every file a command reads;
- the file must be UTF-8 text;
- nesting depth is checked on the event stream before any tree is built;
- aliases are followed but the expanded tree is capped (a "billion laughs" file stops early);
- tags are refused except the core ones, so no constructor ever runs on file content;
- duplicate keys and merge keys (`<<`) are errors instead of silently winning;
- scalars follow the YAML 1.2 core schema: `yes`, `on`, `0644` and `12:30` are not booleans,
  octals or sexagesimals.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import yaml

from sandstack.files import UnreadableFile, read_bytes
from sandstack.spec.errors import Diagnostic, JsonPath, SpecError, format_path
from sandstack.spec.units import MIB

MAX_FILE_BYTES = MIB
MAX_DEPTH = 64
MAX_NODES = 50_000
# Integers beyond 64 bits mean nothing to Docker, and a 20,000-digit one would make Python's
# int-to-text conversion (in any message that shows it) raise instead of report.
MAX_INT = 2**63

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _CoreLoader(_Base):  # type: ignore[misc, valid-type]
    """PyYAML's parser with the YAML 1.2 core schema's implicit types only."""

    yaml_implicit_resolvers: dict = {}


for _tag, _regexp, _first in (
    ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    ("float", r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$", "-+.0123456789"),
    ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
):
    _CoreLoader.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", re.compile(_regexp), list(_first))

_CORE = "tag:yaml.org,2002:"


def _to_int(text: str) -> int:
    return int(text, 0) if text[:2] in ("0o", "0x") else int(text, 10)


_SCALARS = {
    _CORE + "str": str,
    _CORE + "int": _to_int,
    _CORE + "float": float,
    _CORE + "bool": lambda text: text.lower() == "true",
    _CORE + "null": lambda text: None,
}

Position = tuple[int, int]

_KINDS = {"str": "a string", "int": "an integer", "float": "a number", "bool": "true or false", "null": "null"}


@dataclass
class Document:
    """A parsed spec file: plain data plus where each key and value stands in the file. A spec given as an
    object (`from_data`) has no positions: its diagnostics are located by their JSON path alone (line 0)."""

    file: str
    data: object
    values: dict[JsonPath, Position] = field(default_factory=dict)
    keys: dict[JsonPath, Position] = field(default_factory=dict)
    located: bool = True

    def position(self, path: JsonPath, *, key: bool = False) -> Position:
        """Where `path` stands; falls back to the nearest ancestor that exists in the file."""
        if not self.located:
            return (0, 0)
        if key and path in self.keys:
            return self.keys[path]
        probe = tuple(path)
        while probe and probe not in self.values:
            probe = probe[:-1]
        return self.values.get(probe, (1, 1))

    def diagnostic(self, path: JsonPath, message: str, rule: str, *, key: bool = False) -> Diagnostic:
        line, column = self.position(path, key=key)
        return Diagnostic(self.file, line, column, format_path(path), message, rule)


class _Stop(Exception):
    def __init__(self, position: Position, message: str, path: JsonPath = ()):
        self.position = position
        self.message = message
        self.path = path


def _pos(node_or_event) -> Position:
    mark = node_or_event.start_mark
    return (mark.line + 1, mark.column + 1)


def read_text(path: str | os.PathLike[str], display: str | None = None, what: str = "a spec file") -> str:
    """The file's text, or a SpecError whose rule says whether it could not be read ('io': missing, refused, not a
    regular file; sandstack.files, the one reader of every command) or is not a text spec at all ('encoding',
    'size')."""
    name = display or str(path)

    def fail(rule: str, message: str, line: int = 1, column: int = 1) -> SpecError:
        return SpecError([Diagnostic(name, line, column, "$", message, rule)])

    try:
        raw = read_bytes(path, MAX_FILE_BYTES, name, what)
    except UnreadableFile as error:
        raise fail(error.rule, error.strerror) from None
    if b"\x00" in raw:
        offset = raw.index(b"\x00")
        line = raw.count(b"\n", 0, offset) + 1
        raise fail("encoding", f"is a binary file (NUL byte at offset {offset}), not YAML text", line)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise fail("encoding", f"is not UTF-8 text: byte 0x{raw[exc.start]:02x} cannot be decoded", line, column) from None


def parse(text: str, file: str) -> Document:
    """Parse spec text. Raises SpecError (rule 'yaml') with the first problem, located."""
    doc = Document(file, None)
    try:
        _check_shape(text)
        root = yaml.compose(text, Loader=_CoreLoader)
        if root is None or (isinstance(root, yaml.ScalarNode) and root.tag == _CORE + "null" and not root.value):
            # No document at all, or one with no content ('---' alone).
            raise _Stop((1, 1), "the file is empty: a spec is a mapping with 'version', 'hosts' and 'templates'")
        if not isinstance(root, yaml.MappingNode):
            if root.tag not in _SCALARS and root.tag != _CORE + "seq":
                raise _Stop(_pos(root), _tag_message(root.tag))
            raise _Stop(_pos(root), "the top level must be a mapping with 'version', 'hosts' and 'templates', "
                        f"got {_KINDS.get(root.tag.rsplit(':', 1)[-1], 'a list')}")
        doc.data = _Builder(doc).build(root, ())
    except _Stop as stop:
        raise SpecError([Diagnostic(file, *stop.position, format_path(stop.path), stop.message, "yaml")]) from None
    except yaml.reader.ReaderError as exc:
        # A character YAML forbids (a control character, U+FFFE): a one-line message at that character.
        line, column = _offset_position(text, exc.position)
        message = f"invalid YAML: character U+{exc.character:04X} is not allowed ({exc.reason})"
        raise SpecError([Diagnostic(file, line, column, "$", message, "yaml")]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        position = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = " ".join(filter(None, [exc.context, exc.problem])) or "invalid YAML"
        if mark and _indented_with_tab(text, mark.line, mark.column):
            problem = "a tab cannot indent YAML: indent with spaces"
        raise SpecError([Diagnostic(file, *position, "$", f"invalid YAML: {problem}", "yaml")]) from None
    except yaml.YAMLError as exc:
        raise SpecError([Diagnostic(file, 1, 1, "$", f"invalid YAML: {exc}", "yaml")]) from None
    return doc


def _indented_with_tab(text: str, line: int, column: int) -> bool:
    """Whether the parser stopped at a tab in a line's indentation (PyYAML then says 'found character that cannot
    start any token', which names neither the tab nor the fix)."""
    lines = text.split("\n")
    if line >= len(lines):
        return False
    indent = lines[line][: column + 1]
    return indent.endswith("\t") and not indent.strip(" \t")


def _offset_position(text: str, offset: int) -> Position:
    """Line and column of a reader error's offset: bytes of the UTF-8 text for libyaml, characters otherwise."""
    if _Base is yaml.SafeLoader:
        prefix = text[:offset]
    else:
        prefix = text.encode("utf-8")[:offset].decode("utf-8", "replace")
    return prefix.count("\n") + 1, len(prefix) - (prefix.rfind("\n") + 1) + 1


def _clip(text: str, limit: int = 60) -> str:
    """A scalar as a message quotes it: whole when short, cut with '...' when long."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load(path: str | os.PathLike[str], display: str | None = None, what: str = "a spec file") -> Document:
    """Read and parse one spec file (or a policy or review file, `what`); every failure is a SpecError with located
    diagnostics."""
    name = display or str(path)
    return parse(read_text(path, name, what), name)


def from_data(data: object, name: str) -> Document:
    """A spec given as an object (the mapping a spec file parses to), held to what a file may hold: mappings with
    string keys, lists (or tuples), strings, integers within 64 bits, finite numbers, booleans and null, at most
    MAX_DEPTH deep. The data is copied, so later changes to the caller's object change nothing. Raises SpecError
    (rule 'data') with every value that is none of these, located by its JSON path."""
    problems: list[Diagnostic] = []
    nodes = 0

    def fail(path: JsonPath, message: str) -> None:
        problems.append(Diagnostic(name, 0, 0, format_path(path), message, "data"))

    def copy(value: object, path: JsonPath) -> object:
        nonlocal nodes
        nodes += 1
        # A spec is never this deep or this big; an object that contains itself stops here.
        if len(path) > MAX_DEPTH or nodes > MAX_NODES:
            message = f"nesting is deeper than {MAX_DEPTH} levels" if len(path) > MAX_DEPTH else \
                f"more than {MAX_NODES} values"
            raise SpecError([Diagnostic(name, 0, 0, format_path(path), message, "data")])
        if isinstance(value, Mapping):
            out = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    fail(path, f"key {_clip(repr(key))} must be a string")
                    continue
                out[key] = copy(item, path + (key,))
            return out
        if isinstance(value, (list, tuple)):
            return [copy(item, path + (i,)) for i, item in enumerate(value)]
        if value is None or isinstance(value, (str, bool)):
            return value
        if isinstance(value, int):
            if not -MAX_INT <= value < MAX_INT:
                fail(path, "integer out of range: integers in a spec fit in 64 bits")
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                fail(path, f"{value} is not a finite number")
            return value
        fail(path, f"{type(value).__name__} is not a spec value: a spec holds mappings, lists, strings, numbers, "
                   "booleans and null")
        return None

    if not isinstance(data, Mapping):
        raise SpecError([Diagnostic(name, 0, 0, "$", "the top level must be a mapping with 'version', 'hosts' and "
                                    f"'templates', got {type(data).__name__}", "data")])
    plain = copy(data, ())
    if problems:
        raise SpecError(problems)
    return Document(name, plain, located=False)


def _check_shape(text: str) -> None:
    """One streaming pass over parser events: bounded depth, one document, before building a tree.

    libyaml 0.2.6 (in PyYAML 6.0.4's wheels; 0.2.5 before) refuses nesting past 1000 levels in its scanner, which
    reads up to 1024 characters ahead of the parser: on a line of '[' it stops at column 1001, with its own
    message, before the parser reaches level 65. Then the same pass runs on PyYAML's pure-Python parser, which has no
    such limit, so the message and its location are sandstack's own whichever PyYAML is installed."""
    try:
        _check_events(text, _CoreLoader)
    except yaml.MarkedYAMLError as exc:
        if _Base is yaml.SafeLoader or exc.problem != _LIBYAML_NESTING:
            raise
        _check_events(text, yaml.SafeLoader)
        raise  # the pure-Python parser found nothing deeper than MAX_DEPTH: libyaml's own limit stands


_LIBYAML_NESTING = "exceeded maximum nesting depth"


def _check_events(text: str, loader: type) -> None:
    depth = 0
    documents = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise _Stop(_pos(event), f"nesting is deeper than {MAX_DEPTH} levels")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise _Stop(_pos(event), "more than one YAML document: a spec file holds exactly one")


def _tag_message(tag: str) -> str:
    shown = tag.replace(_CORE, "!!")
    return f"tag {shown!r} is not allowed: specs use plain YAML without tags"


class _Builder:
    """Turns composed nodes into plain data, recording positions and refusing what a spec never needs."""

    def __init__(self, doc: Document):
        self.doc = doc
        self.nodes = 0

    def build(self, node: yaml.Node, path: JsonPath) -> object:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _Stop(_pos(node), f"more than {MAX_NODES} values after expanding aliases (an alias bomb?)", path)
        self.doc.values.setdefault(path, _pos(node))
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, path)
        if node.tag not in (_CORE + "map", _CORE + "seq"):
            raise _Stop(_pos(node), _tag_message(node.tag), path)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]
        return self._mapping(node, path)

    def _scalar(self, node: yaml.ScalarNode, path: JsonPath) -> object:
        convert = _SCALARS.get(node.tag)
        if convert is None:
            raise _Stop(_pos(node), _tag_message(node.tag), path)
        kind = node.tag.rsplit(":", 1)[-1]
        try:
            value = convert(node.value)
        except ValueError:
            # int() refuses decimal text past 4300 digits: that is a range problem, not a syntax one.
            if kind == "int" and node.value.lstrip("+-").isdigit():
                value = MAX_INT
            else:
                raise _Stop(_pos(node), f"{_clip(node.value)!r} is not a valid {kind}", path) from None
        if isinstance(value, int) and not isinstance(value, bool) and not -MAX_INT <= value < MAX_INT:
            raise _Stop(_pos(node), f"integer {_clip(node.value)} is out of range: integers in a spec fit in 64 bits",
                        path)
        return value

    def _mapping(self, node: yaml.MappingNode, path: JsonPath) -> dict[str, object]:
        out: dict[str, object] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise _Stop(_pos(key_node), "keys must be plain strings, not lists or mappings", path)
            if key_node.tag == _CORE + "merge" or (key_node.value == "<<" and not key_node.style):
                raise _Stop(_pos(key_node), "merge keys ('<<') are not supported: use 'defaults' or 'profiles'", path)
            key = self._scalar(key_node, path)
            if not isinstance(key, str):
                raise _Stop(_pos(key_node), f"key {_clip(key_node.value)!r} must be a string: quote it", path)
            if key in out:
                first = self.doc.keys[path + (key,)]
                raise _Stop(_pos(key_node), f"duplicate key {_clip(key)!r} (first defined at line {first[0]})",
                            path + (key,))
            self.doc.keys[path + (key,)] = _pos(key_node)
            out[key] = self.build(value_node, path + (key,))
        return out
