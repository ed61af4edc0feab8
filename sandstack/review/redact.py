"""What `preview` and `diff` print of a spec's values: a value `check` flags as a credential (an env value, a
command's argument, a label, …; `sandstack.policy.credentials.flagged_texts`) or holding a word with a known
credential prefix (`sandstack.spec.credentials.CREDENTIAL_PREFIXES`) shows as a placeholder and URL userinfo as
`***@`, in every format (a markdown diff is a pull-request comment). Values sandstack computes
(digests, names) are printed as they are: only what the spec's author wrote can be a credential."""

from __future__ import annotations

from dataclasses import is_dataclass, replace
from typing import Any, Collection

from sandstack.review.diff import Diff, FieldChange, ResourceChange, SnapshotChange
from sandstack.review.reasons import Reason
from sandstack.review.resources import Resource
from sandstack.review.security import Finding
from sandstack.spec.credentials import HIDDEN, MIN_ENTROPY_LENGTH, PLACEHOLDER, USERINFO, mask_prefixed, prefixed

# The fields of the report's records that carry spec values (the others are names sandstack gives, or effects).
WALKED = {Resource: ("props",), ResourceChange: ("resource", "changed", "reasons"), FieldChange: ("old", "new", "inherited"),
          Reason: ("change",), Diff: ("security", "changes", "snapshots", "fields")}
SENTENCES = {Finding: ("text",), SnapshotChange: ("why",)}  # sentences that quote values: masked in place


def _holds(text: str, secret: str) -> bool:
    """Whether `text` shows `secret`: anywhere for a token-sized one (a value quoted inside a longer string), as
    the whole value for a short one (`DB_PASSWORD: agent` is flagged by its name; the template named 'agent' and
    every name built from it stay readable)."""
    return secret in text if len(secret) >= MIN_ENTROPY_LENGTH else text == secret


def _value(text: str, secrets: Collection[str]) -> str:
    # A word with a known credential prefix is hidden wherever it is, flagged or not (a value sandstack built
    # from a spec value, an old value only the base held): the prefix table is the scanner's own.
    if prefixed(text) or any(_holds(text, secret) for secret in secrets):
        return PLACEHOLDER
    return USERINFO.sub(HIDDEN + "@", text)


def _sentence(text: str, secrets: Collection[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        if _holds(text, secret):
            text = text.replace(secret, HIDDEN)
    return USERINFO.sub(HIDDEN + "@", mask_prefixed(text))


def redacted(node: Any, secrets: Collection[str]) -> Any:
    """`node` (resources, a diff, plain JSON values) with every string holding one of `secrets` replaced."""
    secrets = [s for s in secrets if s]
    if isinstance(node, str):
        return _value(node, secrets)
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            new_key = _value(key, secrets) if isinstance(key, str) else key
            while new_key in out:  # two names hidden alike stay two entries
                new_key += "'"
            out[new_key] = redacted(value, secrets)
        return out
    if isinstance(node, (list, tuple)):
        return type(node)(redacted(v, secrets) for v in node)
    if type(node) in WALKED:
        return replace(node, **{a: redacted(getattr(node, a), secrets) for a in WALKED[type(node)]})
    if type(node) in SENTENCES:
        return replace(node, **{a: _sentence(v, secrets) if isinstance(v := getattr(node, a), str)
                                else [_sentence(x, secrets) for x in v] for a in SENTENCES[type(node)]})
    if is_dataclass(node):
        raise TypeError(f"no redaction rule for {type(node).__name__}: add its fields to WALKED or SENTENCES")
    return node
