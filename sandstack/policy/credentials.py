"""Whether a string looks like a credential, by detect-secrets' plugins (a maintained scanner, not our own
regexes). Nothing here returns or logs the string: callers say where, never what."""

from __future__ import annotations

from functools import cache

# Detectors of high-entropy strings flag anything random-looking; a value must also be long enough to be a
# token (short random-looking values such as '7f3a' are hashes, ids or versions).
MIN_ENTROPY_LENGTH = 20
ENTROPY_TYPES = {"Base64 High Entropy String", "Hex High Entropy String"}


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
    return found


def looks_like_credential(text: str, name: str = "VALUE") -> bool:
    return bool(detected_types(text, name))
