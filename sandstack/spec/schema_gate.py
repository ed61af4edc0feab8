"""A fast yes/no on the JSON Schema, before the slow validator that explains each error.

`sandstack validate` on a valid spec (the common case: CI on every push) spent most of its time in jsonschema:
importing it and walking the data through its Python validators, at every `$ref`. jsonschema-rs (Rust) answers
"valid?" for the same schema in a few milliseconds. Only when it says no does schema_errors.py run jsonschema, which
finds, locates and explains every error, so every message is jsonschema's as before.

The gate must never call valid what jsonschema refuses. The one keyword whose meaning differs between the two is
`pattern`: jsonschema searches with Python's `re`, jsonschema-rs with ECMA-262 semantics (`\\s`, `\\d` and `$` differ).
So the gate's schema carries each `pattern` as a custom keyword that runs Python's `re.search`, as jsonschema does.
Were the gate stricter than jsonschema somewhere (no case is known), jsonschema would run and decide: still correct.
"""

from __future__ import annotations

import _signal
import re
from functools import lru_cache
from typing import Any

import jsonschema_rs

from sandstack.spec.schema import published_schema

_PATTERN = "x-sandstack-python-pattern"
# Keywords whose values are data, not schemas: a `pattern` key inside them is not the keyword.
_DATA_KEYWORDS = frozenset({"default", "examples", "const", "enum"})


class _PythonPattern:
    """`pattern` as jsonschema evaluates it: `re.search` on strings, other types pass."""

    def __init__(self, parent_schema: dict, value: str, schema_path: list) -> None:
        self._search = re.compile(value).search

    def validate(self, instance: Any) -> None:
        if isinstance(instance, str) and not self._search(instance):
            raise ValueError("does not match the pattern")


def _python_patterns(node: Any) -> Any:
    """The schema with every `pattern` keyword renamed to the custom keyword above."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                out[_PATTERN] = value
            elif key in _DATA_KEYWORDS or key.startswith("x-"):
                out[key] = value
            else:
                out[key] = _python_patterns(value)
        return out
    if isinstance(node, list):
        return [_python_patterns(item) for item in node]
    return node


@lru_cache(maxsize=1)
def _gate() -> jsonschema_rs.Draft202012Validator:
    return jsonschema_rs.Draft202012Validator(_python_patterns(published_schema()), validate_formats=False,
                                              keywords={_PATTERN: _PythonPattern})


def schema_valid(data: object) -> bool:
    """Whether `data` satisfies the published schema, as jsonschema would judge it (see the module's note).

    SIGINT is held back for the few milliseconds of the Rust call: a KeyboardInterrupt raised in the pattern
    keyword's Python code there is swallowed by jsonschema-rs (the gate answered "invalid", the interrupt was lost)
    or printed as "Exception ignored" with a traceback. Held back, it is raised here once the call returns. The
    Python-level handler is swapped, not the thread's signal mask: Python runs its handlers in the main thread
    whichever thread the kernel gave the signal to (a process with other threads, a signal received just before
    the call), and a mask held back only what reached this thread."""
    held: list[int] = []
    if _signal.getsignal(_signal.SIGINT) is None:  # a handler not set from Python: not ours to swap and restore
        return _gate().is_valid(data)
    try:
        previous = _signal.signal(_signal.SIGINT, lambda signum, frame: held.append(signum))
    except ValueError:  # not the main thread: Python's handlers never run here, nothing to hold back
        return _gate().is_valid(data)
    try:
        return _gate().is_valid(data)
    finally:
        _signal.signal(_signal.SIGINT, previous)
        if held:
            _signal.raise_signal(_signal.SIGINT)  # to the handler that was there: a KeyboardInterrupt, as a rule
