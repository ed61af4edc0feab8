"""A sandbox's environment may refer to its own public host name and URLs: `${SANDSTACK_PUBLIC_HOSTNAME}`,
`${SANDSTACK_URL_<NAME>}` (one per `exposure: url` port). The plan renders them per sandbox (sandstack.plan.sandbox),
the rules check them before (sandstack.spec.rules.ingress); both read this one grammar.

Only `${SANDSTACK_…}` is read: any other `$` stays as written (Docker passes an environment value as it is), and
`$${SANDSTACK_…}` is the literal text `${SANDSTACK_…}`. A URL port's host name is `<port>-` and the public host
name, so a value composes it: `8080-${SANDSTACK_PUBLIC_HOSTNAME}` (docs/design/ingress.md)."""

from __future__ import annotations

import re
from typing import Iterable, Mapping

PUBLIC_HOSTNAME = "SANDSTACK_PUBLIC_HOSTNAME"
URL_PREFIX = "SANDSTACK_URL_"
# `$$` escapes; the name is what a variable name may be (models.base ENV_NAME_PATTERN) after the prefix.
_REFERENCE = re.compile(r"(\$?)\$\{(SANDSTACK_[A-Za-z0-9_]*)\}")


def url_variable(port: int, name: str | None) -> str:
    """SANDSTACK_URL_<NAME> of a url port: its name, else its number, upper case, '-' as '_'."""
    return URL_PREFIX + (name or str(port)).upper().replace("-", "_")


def variables(ports: Iterable) -> tuple[str, ...]:
    """What a template's sandboxes may refer to: their public host name and each url port's URL."""
    return (PUBLIC_HOSTNAME, *(url_variable(p.port, p.name) for p in ports if p.exposure == "url"))


def references(value: str) -> list[str]:
    """The `${SANDSTACK_…}` names a value refers to, in order, once each (escaped ones are not references)."""
    return list(dict.fromkeys(m.group(2) for m in _REFERENCE.finditer(value) if not m.group(1)))


def render(value: str, values: Mapping[str, str]) -> str:
    """The value with each reference replaced by its variable's value and each `$${…}` unescaped. A name `values`
    lacks raises KeyError: the rules refuse such a spec first (rule env-reference)."""
    return _REFERENCE.sub(lambda m: "${" + m.group(2) + "}" if m.group(1) else values[m.group(2)], value)
