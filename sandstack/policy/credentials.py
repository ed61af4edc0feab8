"""Credentials in a spec (SBX-SEC-001, SBX-SEC-002): whether a string looks like a credential, by detect-secrets'
plugins (a maintained scanner, not our own regexes), and the checks over env values, env names and every secret
reference. Nothing here returns or logs a suspect string: findings say where, never what, and a suspect env name
is replaced in both the message and the JSON path (the path is printed in every format too)."""

from __future__ import annotations

import re
from functools import cache
from typing import Any, Iterator

from pydantic import BaseModel

from sandstack.policy.findings import Violation
from sandstack.spec.errors import format_path
from sandstack.spec.models.base import CONFIG_KEY_PATTERN
from sandstack.spec.resolve import ResolvedStack

# Detectors of high-entropy strings flag anything random-looking; a value must also be long enough to be a
# token (short random-looking values such as '7f3a' are hashes, ids or versions).
MIN_ENTROPY_LENGTH = 20
ENTROPY_TYPES = {"Base64 High Entropy String", "Hex High Entropy String"}
# A git object id (SHA-1, or SHA-256 in a sha256 repository) under a name that says so (GIT_COMMIT, GITHUB_SHA,
# SOURCE_REVISION) is a public commit id, not a secret. Only the hex-entropy detector is waived, and only for
# exactly that shape (lower-case hex, as git prints it): a keyword or a token format (e.g. `ghp_…`) still counts.
# This is what detect-secrets' own `--exclude-secrets REGEX` filter does for a scan; we call its plugins directly.
COMMIT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
COMMIT_WORDS = {"COMMIT", "SHA", "SHA1", "REVISION", "REV"}


@cache
def _plugins() -> tuple:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    plugins = []
    for cls in get_mapping_from_secret_type_to_class().values():
        try:
            plugins.append(cls())
        except TypeError:  # a plugin that needs configuration we do not give it
            continue
    return tuple(plugins)


def detected_types(text: str, name: str = "VALUE") -> set[str]:
    """The kinds of secret detect-secrets sees in `text` (as a value, and as an assignment to `name`)."""
    found: set[str] = set()
    for plugin in _plugins():
        for line in (text, f'{name} = "{text}"'):
            for secret in plugin.analyze_line(filename="stack.yaml", line=line, line_number=1):
                found.add(secret.type)
    if len(text) < MIN_ENTROPY_LENGTH:
        found -= ENTROPY_TYPES
    if COMMIT_ID.fullmatch(text) and COMMIT_WORDS & set(name.upper().split("_")):
        found.discard("Hex High Entropy String")
    return found


def looks_like_credential(text: str, name: str = "VALUE") -> bool:
    return bool(detected_types(text, name))


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
    if path[:1] == ("templates",):
        return f"Template '{path[1]}'", f"template/{path[1]}", 2
    if path[:1] == ("hosts",):
        return f"Host '{path[1]}'", f"host/{path[1]}", 2
    if path[:1] == ("defaults",):
        return "The stack defaults", "stack", 1
    return "The stack", "stack", 0


def _env_blocks(spec: ResolvedStack) -> Iterator[tuple[tuple, dict]]:
    yield ("defaults",), spec.spec.defaults.env
    for name, template in spec.spec.templates.items():
        yield ("templates", name), template.env


def check_credentials(spec: ResolvedStack) -> Iterator[Violation]:
    suspect_names: set[tuple] = set()  # (block, env name): never printed, not even in a path
    for prefix, env in _env_blocks(spec):
        owner, target, _ = _owner(prefix)
        for key, value in env.items():
            if looks_like_credential(key):
                suspect_names.add((*prefix, key))
                yield Violation("SBX-SEC-001", target, (*prefix, "env"),
                                f"{owner} must not hold a credential in an env entry's name (name not shown).")
                if isinstance(value, str) and looks_like_credential(value):
                    yield Violation("SBX-SEC-001", target, (*prefix, "env"),
                                    f"{owner} must not hold a credential in plain env (name and value not shown).")
            elif isinstance(value, str) and looks_like_credential(value, name=key):
                yield Violation("SBX-SEC-001", target, (*prefix, "env", key),
                                f"{owner} must not hold a credential in plain env {key} (value not shown).")
    for path, key in secret_references(spec.spec):
        if not looks_like_credential(key):
            continue
        owner, target, size = _owner(path)
        if len(path) > size + 1 and path[size] == "env" and (*path[:size], path[size + 1]) in suspect_names:
            where, path = "the secret reference of an env entry whose name is not shown", path[:size + 1]
        else:
            where = format_path(path[size:]).removeprefix("$.")
        yield Violation("SBX-SEC-002", target, path,
                        f"{owner} must name a config key in {where}, not a value that looks like a credential "
                        "(not shown).")
