"""Credentials in a spec (SBX-SEC-001 … 005): every string a user writes into a spec (env values and names,
secret references, setup steps, commands, readiness argv, labels, descriptions, suppression reasons, …) and every
line of the files it ships into sandboxes (`snapshot.files`, `data`), scanned with detect-secrets' plugins in one
batch (`sandstack.spec.credentials`). Nothing here returns or logs a suspect string: findings say where, never
what, and a suspect name (an env name, a label key) is left out of both the message and the JSON path (the path
is printed in every format too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, NamedTuple

from pydantic import BaseModel

from sandstack.policy.findings import Violation
from sandstack.spec.credentials import detected_types, looks_like_credential, scan, secret_named
from sandstack.spec.errors import format_path
from sandstack.spec.models.base import CONFIG_KEY_PATTERN
from sandstack.spec.resolve import ResolvedStack

__all__ = ["check_credentials", "detected_types", "flagged_texts", "looks_like_credential", "secret_references"]

AWS_KEY_ID = "AWS Access Key"
# The name under which detect-secrets' AWS plugin sees the other half of a key pair (its `aws…key = "<40>"`
# pattern): a value beside an AWS access key id in the same block is scanned under it too.
AWS_PAIR_NAME = "aws_secret_access_key"


def _is_config_key(model: type[BaseModel], field_name: str) -> bool:
    """Whether a model field names a Pulumi config key: every secret reference of the spec is one."""
    return any(getattr(m, "pattern", None) == CONFIG_KEY_PATTERN for m in model.model_fields[field_name].metadata)


def secret_references(node: Any, path: tuple = ()) -> Iterator[tuple[tuple, str]]:
    """(JSON path, config key) of every secret reference under a model, whatever its kind (env values, secret
    files, TLS material, the ingress's certificate, the runtime's token, and any added later), found by type."""
    if isinstance(node, BaseModel):
        for name in type(node).model_fields:
            value = getattr(node, name)
            if isinstance(value, str) and _is_config_key(type(node), name):
                yield (*path, name), value
            else:
                yield from secret_references(value, (*path, name))
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from secret_references(value, (*path, key))
    elif isinstance(node, (list, tuple)):
        for index, value in enumerate(node):
            yield from secret_references(value, (*path, index))


def _owner(path: tuple) -> tuple[str, str, int]:
    """(who, target, length of its prefix) of a path in the stack file."""
    if path[:1] == ("templates",) and len(path) > 1:
        return f"Template '{path[1]}'", f"template/{path[1]}", 2
    if path[:1] == ("hosts",) and len(path) > 1:
        return f"Host '{path[1]}'", f"host/{path[1]}", 2
    if path[:1] == ("pools",) and len(path) > 1:
        return f"Pool '{path[1]}'", f"pool/{path[1]}", 2
    if path[:1] == ("defaults",):
        return "The stack defaults", "stack", 1
    return "The stack", "stack", 0


class _Item(NamedTuple):  # a tuple: a 40,000-entry spec makes 80,000 of them
    kind: str  # "name" (a mapping key), "env" (an env value), "ref" (a config key), "text", "file", "pair"
    path: tuple  # where it is written (for a file's line: the spec entry that ships the file)
    name: str  # what detect-secrets sees it assigned to
    text: str
    where: str = ""  # for a file's line: 'files/x.py line 3'


def _strings(node: Any, path: tuple, refs: set[tuple], key: str, out: list[_Item]) -> list[_Item]:
    """Every string the spec holds (mapping keys too), the config keys of secret references as 'ref'; a value
    is scanned under its own key (a label's, a field's): the keyword plugin reads `password: x` as a pair."""
    if isinstance(node, dict):
        env = path[-1:] == ("env",)
        for name, value in node.items():
            where = (*path, name)
            if isinstance(name, str):
                out.append(_Item("name", where, "VALUE", name))
            if isinstance(value, str) and env:
                out.append(_Item("env", where, name, value))
            else:
                _strings(value, where, refs, name if isinstance(name, str) else key, out)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            _strings(value, (*path, index), refs, key, out)
    elif isinstance(node, str):
        out.append(_Item("ref", path, "VALUE", node) if path in refs else _Item("text", path, key, node))
    return out


def _shipped(spec: ResolvedStack) -> Iterator[_Item]:
    """Each line of each file a template ships into its sandboxes (snapshot files, data mounts)."""
    root = spec.source.parent
    seen: set[Path] = set()
    for name, t in spec.templates.items():
        for index, f in enumerate(t.files):
            yield from _file_lines(f.source, ("templates", name, "snapshot", "files", index, "source"), root, seen)
        for index, d in enumerate(t.data):
            for _, source in d.files:
                yield from _file_lines(source, ("templates", name, "data", index, "source"), root, seen)


def _file_lines(source: Path, path: tuple, root: Path, seen: set[Path]) -> Iterator[_Item]:
    if source in seen:  # a file two templates ship is reported once
        return
    seen.add(source)
    try:
        text = source.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return  # validation read it; a file gone since is the build's error to report
    shown = source.relative_to(root).as_posix() if source.is_relative_to(root) else source.name
    for number, line in enumerate(text.splitlines(), start=1):
        yield _Item("file", path, "VALUE", line, f"{shown} line {number}")


def _hidden_keys(items: list[_Item], found: list[set[str]]) -> set[tuple]:
    return {item.path for item, kinds in zip(items, found) if item.kind == "name" and kinds}


def _safe_path(path: tuple, hidden: set[tuple]) -> tuple[tuple, bool]:
    """`path` cut before the first key that looks like a credential (never printed), and whether it was cut."""
    for end in range(1, len(path) + 1):
        if path[:end] in hidden:
            return path[:end - 1], True
    return path, False


def _pairs(items: list[_Item], found: list[set[str]]) -> list[_Item]:
    """The other strings of each mapping that holds an AWS access key id, to be scanned as its secret half."""
    blocks = {item.path[:-1] for item, kinds in zip(items, found)
              if AWS_KEY_ID in kinds and item.kind in ("env", "text")}
    return [_Item("pair", item.path, AWS_PAIR_NAME, item.text) for item, kinds in zip(items, found)
            if item.kind in ("env", "text") and item.path[:-1] in blocks and not kinds]


def _named_secret(item: _Item) -> bool:
    """A plain env value under a name that says it holds a secret (`*_TOKEN`, `*_KEY`, `*PASSWORD*`, …;
    sandstack.spec.credentials.secret_named), whatever it looks like: never printed, and SBX-SEC-005 when nothing
    else flags it."""
    return item.kind == "env" and item.text != "" and secret_named(item.name)


def flagged_texts(spec: ResolvedStack) -> set[str]:
    """Every string of the spec `check_credentials` flags (not the shipped files' lines), and every value of a
    secret-named env variable: what `preview` and `diff` must not print."""
    return {item.text for item, kinds in _scanned(spec, files=False) if kinds or _named_secret(item)}


def check_credentials(spec: ResolvedStack) -> Iterator[Violation]:
    scanned = _scanned(spec)
    hidden = _hidden_keys([i for i, _ in scanned], [k for _, k in scanned])
    for item, kinds in scanned:
        if kinds:
            yield _violation(item, hidden)
        elif _named_secret(item):
            owner, target, _ = _owner(item.path)
            path, cut = _safe_path(item.path, hidden)
            place = "an env entry whose name is not shown" if cut else f"env {item.name}"
            yield Violation("SBX-SEC-005", target, path, f"{owner} must give {place} as a secret reference: its name "
                                                         "says it holds one (value not shown).")


def _scanned(spec: ResolvedStack, files: bool = True) -> list[tuple[_Item, set[str]]]:
    refs = {path for path, _ in secret_references(spec.spec)}
    data = spec.spec.model_dump(mode="json", by_alias=True, exclude_unset=True)
    items = _strings(data, (), refs, "VALUE", [])
    shipped = len(items)
    items += _shipped(spec) if files else ()
    found = scan([(i.name, i.text) for i in items])
    hidden = _hidden_keys(items, found)
    # A value under a name that is itself a credential is scanned on its own (the name would flag it again).
    again = [n for n, i in enumerate(items) if i.kind != "name" and i.path[-1:] and i.path in hidden]
    for n, kinds in zip(again, scan([("VALUE", items[n].text) for n in again])):
        found[n] = kinds
    pairs = _pairs(items, found)
    items += pairs
    # Only the AWS plugin's verdict counts for a pair (the keyword plugin flags anything under a `secret` name).
    found += [kinds & {AWS_KEY_ID} for kinds in scan([(i.name, i.text) for i in pairs])]
    scanned = list(zip(items, found))
    files_end = len(scanned) - len(pairs)
    return scanned[:shipped] + scanned[files_end:] + _per_file(scanned[shipped:files_end])


def _per_file(scanned: list[tuple[_Item, set[str]]]) -> list[tuple[_Item, set[str]]]:
    """One finding per shipped file, naming each line that holds a credential (a PEM block is several)."""
    out, lines = [], {}
    for item, kinds in scanned:
        if kinds:
            file, _, number = item.where.rpartition(" line ")
            lines.setdefault((file, item.path), []).append(number)
    for (file, path), numbers in lines.items():
        where = f"{file} line{'s' * (len(numbers) > 1)} {', '.join(numbers)}"
        out.append((_Item("file", path, "VALUE", "", where), {"file"}))
    return out


def _violation(item: _Item, hidden: set[tuple]) -> Violation:
    owner, target, size = _owner(item.path)
    path, cut = _safe_path(item.path, hidden)
    where = format_path(path[size:]).removeprefix("$.") or "the stack"
    if item.kind == "name":
        rule = "SBX-SEC-001" if path[-1:] == ("env",) else "SBX-SEC-003"
        what = "an env entry's name" if rule == "SBX-SEC-001" else f"a name in {where}"
        return Violation(rule, target, path, f"{owner} must not hold a credential in {what} (name not shown).")
    if item.kind == "ref":
        place = "the secret reference of an env entry whose name is not shown" if cut else where
        return Violation("SBX-SEC-002", target, path, f"{owner} must name a config key in {place}, not a value that "
                                                      "looks like a credential (not shown).")
    if item.kind == "env":
        place = "plain env (name and value not shown)" if cut else f"plain env {item.path[-1]} (value not shown)"
        return Violation("SBX-SEC-001", target, path, f"{owner} must not hold a credential in {place}.")
    if item.kind == "pair":
        return Violation("SBX-SEC-001" if "env" in item.path else "SBX-SEC-003", target, path,
                         f"{owner} must not hold the secret half of an AWS key pair in {where} (value not shown): "
                         "an access key id sits beside it.")
    if item.kind == "file":
        return Violation("SBX-SEC-004", target, path, f"{owner} must not ship a credential into its sandboxes: "
                                                      f"{item.where} (value not shown).")
    return Violation("SBX-SEC-003", target, path, f"{owner} must not hold a credential in {where} (value not shown).")
