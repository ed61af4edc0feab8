"""What looks like a credential, by detect-secrets' plugins (a maintained scanner, not our own regexes), and how
text that may carry one is shown: `check` flags such values, and no output of any command prints them.

`scan` takes every string of a spec at once: running each plugin over every string costs ~0.3 ms a string (40,000
env entries took seconds), so the plugins' own patterns first run once over all the strings joined, and only the
lines a pattern can match are analysed plugin by plugin (`detected_types`, exactly as before). Strings are
analysed line by line, as detect-secrets scans a file, both as they are and as an assignment to their name
(`NAME = "value"`), which is what its keyword and AWS plugins need to see a pair such as `AWS_SECRET_ACCESS_KEY`;
a long run of token characters in a line of several words is analysed on its own too (`X-Token: <token>`).

A word that starts with a known credential prefix (`CREDENTIAL_PREFIXES`: `xoxb-`, `ghp_`, `glpat-`, `AKIA`, …) is
a credential whatever follows: the table is one more plugin here and the printers' redaction reads it too.

`redact` masks what may be a secret in a message (every diagnostic and finding goes through it), and an
address is not a credential (detect-secrets' public-IP plugin is left out: specs name addresses on purpose).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from functools import cache
from typing import Iterator, Sequence

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
# An address is no credential, and a spec names public addresses on purpose (allow lists, resolvers).
NOT_CREDENTIALS = {"Public IP (ipv4)"}
# A long run of token characters in a line of several words; not an image digest (`@sha256:<hex>` is public).
TOKEN_RUN = re.compile(rf"(?<![A-Za-z0-9+/=_.~-])(?<!sha256:)[A-Za-z0-9+/=_.~-]{{{MIN_ENTROPY_LENGTH},}}")
PLACEHOLDER = "(redacted: looks like a credential)"
HIDDEN = "***"
# Credentials in a URL's userinfo (`scheme://user:password@host`, `user:token@registry/image`): the part before
# '@' when it holds a ':'. An image's `name:tag@sha256:…` is a digest, not userinfo.
USERINFO = re.compile(r"(?:(?<=://)|(?<![^\s'\"(=,\[]))[^\s'\"/@:\[\]]+:[^\s'\"/@]*@(?![A-Za-z0-9]+:[0-9a-fA-F]{32,})")


# Known credential prefixes: a word that starts with one is a credential whatever follows (a token's body is random,
# and a scanner that waits for the exact shape misses `xoxb-` with 24 hex characters). The one table the scanner
# (`KnownPrefixDetector`, beside detect-secrets' plugins) and every printer's redaction (sandstack.review.redact)
# read: (prefix, what it is, what must follow it in the same word). What follows is any run of token characters
# (ANY), except after a prefix that also begins ordinary words and identifiers (`sk-learn`, `hf_hub_download`,
# `npm_config_cache`: MIXED, a random-looking tail with capitals and small letters) or an upper-case word
# (`ASIA_PACIFIC`: UPPER, capitals and digits only, as AWS writes its key ids).
_CHARS = r"[A-Za-z0-9_\-+/=.]"  # base64 and URL-safe alphabets, a JWT's or SendGrid's dots
MIN_TAIL = 8  # a prefix named in prose ('tokens start with xoxb-') is not a credential
ANY = rf"{_CHARS}{{{MIN_TAIL},}}"
MIXED = rf"(?={_CHARS}*[A-Z])(?={_CHARS}*[a-z]){_CHARS}{{16,}}"
UPPER = r"[A-Z0-9]{12,}"
CREDENTIAL_PREFIXES: tuple[tuple[str, str, str], ...] = (
    ("xoxb-", "Slack bot token", ANY), ("xoxp-", "Slack user token", ANY), ("xoxa-", "Slack app token", ANY),
    ("xoxr-", "Slack refresh token", ANY), ("xoxs-", "Slack session token", ANY),
    ("xoxe-", "Slack configuration token", ANY), ("xapp-", "Slack app-level token", ANY),
    ("ghp_", "GitHub personal access token", ANY), ("gho_", "GitHub OAuth token", ANY),
    ("ghu_", "GitHub user-to-server token", ANY), ("ghs_", "GitHub server-to-server token", ANY),
    ("ghr_", "GitHub refresh token", ANY), ("github_pat_", "GitHub fine-grained token", ANY),
    ("glpat-", "GitLab personal access token", ANY), ("gldt-", "GitLab deploy token", ANY),
    ("glrt-", "GitLab runner token", ANY), ("glptt-", "GitLab pipeline trigger token", ANY),
    ("sk-ant-", "Anthropic API key", ANY), ("sk-proj-", "OpenAI project key", ANY),
    ("sk-", "OpenAI-style secret key", MIXED),
    ("sk_live_", "Stripe secret key", ANY), ("sk_test_", "Stripe test secret key", ANY),
    ("rk_live_", "Stripe restricted key", ANY), ("whsec_", "Stripe webhook secret", ANY),
    ("AKIA", "AWS access key id", UPPER), ("ASIA", "AWS temporary access key id", UPPER),
    ("AIza", "Google API key", ANY), ("ya29.", "Google OAuth access token", ANY),
    ("hf_", "Hugging Face token", MIXED), ("npm_", "npm token", MIXED), ("pypi-", "PyPI token", MIXED),
    ("dop_v1_", "DigitalOcean token", ANY), ("shpat_", "Shopify access token", ANY),
    ("SG.", "SendGrid API key", ANY),
)
KNOWN_PREFIX = "Known credential prefix"
# A prefix counts at the start of a word, not inside one ('task-…' holds no 'sk-').
_WORD_START = r"(?<![A-Za-z0-9_\-+/=.])"


def _prefix_pattern() -> re.Pattern:
    # Longest prefix first: `sk-ant-` is tried before `sk-`, whose tail rule would refuse `ant-api03-…`.
    entries = sorted(CREDENTIAL_PREFIXES, key=lambda entry: len(entry[0]), reverse=True)
    return re.compile(_WORD_START + "(?:" + "|".join(f"{re.escape(prefix)}{tail}" for prefix, _, tail in entries)
                      + ")")


PREFIXED = _prefix_pattern()


# Names that say a variable holds a secret: its value is never printed (preview, diff, validate's errors) and
# `check` wants it as `{secret: KEY}` (SBX-SEC-005). By the name's words (split at `_`, `-`, `.` and case changes):
# - one of SECRET_ANYWHERE anywhere in it (`*PASSWORD*`, `PGPASSWORD`, `CLIENT_SECRET`, `AWS_SECRET_ACCESS_KEY`);
# - or a last word in SECRET_LAST (`*_TOKEN`, `*_KEY`, `*_APIKEY`, `*_PAT`, …), after any part markers a credential
#   split across variables carries (`TOKEN_A`/`TOKEN_B`, `API_KEY_1`, `KEY_PART2`);
# - never a name whose last word says it holds where or what the secret is, not the secret (`*_FILE`, `*_PATH`,
#   `*_ID`, `*_NAME`, …), nor one with a word that says the value is public (`PUBLIC_KEY`).
SECRET_ANYWHERE = ("PASSWORD", "PASSWD", "PASSPHRASE", "SECRET")
SECRET_LAST = frozenset({"TOKEN", "KEY", "APIKEY", "PAT", "CREDENTIAL", "CREDENTIALS", "PASS", "PWD", "AUTH",
                         "PRIVATEKEY", "COOKIE"})
NOT_SECRET_LAST = frozenset({"FILE", "PATH", "DIR", "NAME", "ID", "TYPE", "LENGTH", "SIZE", "COUNT", "HEADER",
                             "ENABLED", "URL", "ENDPOINT", "HOST", "PORT", "EXPIRY", "TTL"})
NOT_SECRET_WORDS = frozenset({"PUBLIC", "PUB"})
_PART = re.compile(r"[0-9]+|[A-Z]|PART[0-9]*|HALF")
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def secret_named(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret (see SECRET_ANYWHERE and SECRET_LAST)."""
    words = [word.upper() for word in _WORDS.findall(name)]
    if not words or words[-1] in NOT_SECRET_LAST or NOT_SECRET_WORDS & set(words):
        return False
    if any(word in name.upper() for word in SECRET_ANYWHERE):
        return True
    while len(words) > 1 and _PART.fullmatch(words[-1]):
        words.pop()
    return words[-1] in SECRET_LAST


def secret_env_path(path: tuple) -> bool:
    """Whether a JSON path is, or is under, the value of a secret-named env variable of a template or the
    defaults (`templates.T.env.NAME`, `defaults.env.NAME`)."""
    at = 2 if path[:1] == ("templates",) else 1 if path[:1] == ("defaults",) else None
    return (at is not None and len(path) > at + 1 and path[at] == "env" and isinstance(path[at + 1], str)
            and secret_named(path[at + 1]))


def prefixed(text: str) -> bool:
    """Whether `text` holds a word that starts with a known credential prefix (CREDENTIAL_PREFIXES)."""
    return PREFIXED.search(text) is not None


def mask_prefixed(text: str) -> str:
    """`text` with each word that starts with a known credential prefix replaced by HIDDEN."""
    return PREFIXED.sub(HIDDEN, text)


@cache
def _plugins() -> tuple:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    class KnownPrefixDetector(RegexBasedDetector):
        """CREDENTIAL_PREFIXES as one more detect-secrets plugin: batched, prefiltered and reported as the others."""

        secret_type = KNOWN_PREFIX
        denylist = (PREFIXED,)

    plugins = [KnownPrefixDetector()]
    for kind, cls in get_mapping_from_secret_type_to_class().items():
        if kind in NOT_CREDENTIALS:
            continue
        try:
            plugins.append(cls())
        except TypeError:  # a plugin that needs configuration we do not give it
            continue
    return tuple(plugins)


def _lines_of(text: str, name: str) -> tuple[str, str]:
    return text, f'{name} = "{text}"'


def detected_types(text: str, name: str = "VALUE") -> set[str]:
    """The kinds of secret detect-secrets sees in one line of text (as a value, and as an assignment to `name`)."""
    found: set[str] = set()
    for plugin in _plugins():
        for line in _lines_of(text, name):
            for secret in plugin.analyze_line(filename="stack.yaml", line=line, line_number=1):
                found.add(secret.type)
    if len(text) < MIN_ENTROPY_LENGTH:
        found -= ENTROPY_TYPES
    if COMMIT_ID.fullmatch(text) and COMMIT_WORDS & set(name.upper().split("_")):
        found.discard("Hex High Entropy String")
    return found


@cache
def _prefilters() -> tuple[tuple[tuple[re.Pattern, bool, bool], ...], tuple, bool]:
    """((pattern, searched lower-cased, found in the assignment line too), the entropy plugins, whether some
    plugin has neither) over what any plugin's match in a line needs.

    A regex plugin matches a line only where one of its `denylist` patterns does (taken with MULTILINE, so that
    `^`/`$` mean a line's ends in the joined text, as they mean the string's ends for one line); the keyword
    plugin only on a line holding one of its keywords; the entropy plugins only on a quoted run of their
    characters (checked with their own entropy limit)."""
    from detect_secrets.plugins import keyword
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.plugins.high_entropy_strings import HighEntropyStringsPlugin

    patterns, entropy, unknown = [], [], False
    for plugin in _plugins():
        if isinstance(plugin, RegexBasedDetector):
            patterns += [(re.compile(p.pattern, p.flags | re.MULTILINE), False, _in_assignment(p.pattern))
                         for p in plugin.denylist]
        elif isinstance(plugin, keyword.KeywordDetector):
            # Its keywords are lower-case: searched in the lower-cased text, ~10x faster than with IGNORECASE.
            patterns.append((re.compile("|".join(keyword.DENYLIST)), True, True))
        elif isinstance(plugin, HighEntropyStringsPlugin):
            entropy.append(plugin)
        else:
            unknown = True  # analysed on every line: slower, never blind
    return tuple(patterns), tuple(entropy), unknown


# Context tests that hold alike at a value's ends and inside `NAME = "value"` (where a quote surrounds it):
# detect-secrets' assignment patterns begin with the first; a negative lookahead for a class without a quote;
# a start or an end that a quote satisfies as well as the line's own end (its Artifactory patterns).
SAME_IN_QUOTES = re.compile(r"\(\?:\(\?<=\\W\)\|\(\?<=\^\)\)|\(\?!(?:\\w|\[[^\]\"]*\])\)"
                            r"|\(\?:\\s\|=\|:\|\"\|\^\)|\(\?:\\s\|\"\|\$\)")
CONTEXT = re.compile(r"\^|\$|\\A|\\Z|\(\?<!|\(\?!")


def _in_assignment(pattern: str) -> bool:
    """Whether every match of `pattern` in a value is also a match in `NAME = "value"`: no anchor and no
    negative lookaround but those that hold alike there. Such a pattern is searched in the assignment lines
    only (half the text: the slowest plugins' patterns took most of a 40,000-entry spec's scan)."""
    return CONTEXT.search(SAME_IN_QUOTES.sub("", pattern)) is None


def _hits(pattern: re.Pattern, text: str, starts: list[int]) -> Iterator[int]:
    """Indices of the lines of `text` (starting at `starts`) in which `pattern` may match.

    The leftmost match from a line's start begins in that line if the line alone has a match there; the search
    then goes on from the next line, so a match running over a line's end hides nothing."""
    pos = 0
    while (match := pattern.search(text, pos)) is not None:
        index = bisect_right(starts, match.start()) - 1
        yield index
        if index + 1 >= len(starts):
            return
        pos = starts[index + 1]


def _joined(lines: Sequence[str]) -> tuple[str, list[int]]:
    starts, offset = [], 0
    for line in lines:
        starts.append(offset)
        offset += len(line) + 1
    return "\n".join(lines), starts


def _candidates(lines: list[str], lengths: list[int], paired: bool = False) -> set[int]:
    """Indices of the lines some plugin may flag (a superset: each is then analysed in full). `paired`: the
    lines come as (value, `NAME = "value"`) pairs."""
    patterns, entropy, unknown = _prefilters()
    if unknown:
        return set(range(len(lines)))
    text, starts = _joined(lines)
    assignments, assignment_starts = _joined(lines[1::2]) if paired else (text, starts)
    lowered = {id(text): text.lower(), id(assignments): assignments.lower()}
    found: set[int] = set()
    for pattern, lower, in_assignment in patterns:
        only_assignments = paired and in_assignment
        haystack, offsets = (assignments, assignment_starts) if only_assignments else (text, starts)
        if lower and len(lowered[id(haystack)]) == len(haystack):  # the same offsets (a letter may lower to two)
            haystack = lowered[id(haystack)]
        elif lower:
            pattern = re.compile(pattern.pattern, re.IGNORECASE)
        found |= {2 * i + 1 if only_assignments else i for i in _hits(pattern, haystack, offsets)}
    for plugin in entropy:
        for match in plugin.regex.finditer(text):
            index = bisect_right(starts, match.start()) - 1
            if (index not in found and lengths[index] >= MIN_ENTROPY_LENGTH
                    and plugin.calculate_shannon_entropy(match.group(2)) > plugin.entropy_limit):
                found.add(index)
    return found


def _parts(text: str) -> list[str]:
    """What is analysed of a string: each line, and each long run of token characters in a line of several words
    (the entropy plugins see only a quoted run: `X-Token: <token>` in an argv element is found as a word)."""
    out = []
    for line in text.splitlines() or [text]:
        out.append(line)
        if len(line) > MIN_ENTROPY_LENGTH:
            out += [word for word in TOKEN_RUN.findall(line) if word != line]
    return out


def scan(items: Sequence[tuple[str, str]]) -> list[set[str]]:
    """For each (name, text), the kinds of secret detect-secrets sees in any line of text, all items in one
    batch (see the module's docstring)."""
    lines: list[str] = []
    owners: list[tuple[int, str]] = []  # per line of `lines`: (item, the text line it comes from)
    lengths: list[int] = []
    for index, (name, text) in enumerate(items):
        for part in _parts(text):
            for line in _lines_of(part, name):
                lines.append(line)
                owners.append((index, part))
                lengths.append(len(part))
    out: list[set[str]] = [set() for _ in items]
    done: set[tuple[int, str]] = set()
    for line in sorted(_candidates(lines, lengths, paired=True)):
        index, part = owners[line]
        if (index, part) not in done:
            done.add((index, part))
            out[index] |= detected_types(part, items[index][0])
    return out


def flagged(items: Sequence[tuple[str, str]]) -> list[bool]:
    return [bool(types) for types in scan(items)]


def looks_like_credential(text: str, name: str = "VALUE") -> bool:
    return flagged([(name, text)])[0]


def _secret_values(part: str) -> set[str]:
    """The substrings of one line (or word) detect-secrets takes for secrets: a pattern plugin's whole match
    (its reported value may be just a group, `ghp` of a GitHub token), an entropy plugin's long quoted run."""
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.plugins.keyword import KeywordDetector

    values = set()
    for plugin in _plugins():
        if isinstance(plugin, KeywordDetector):
            # A message is prose ("secrets: the files are owned …"), and a value the keyword plugin flags only
            # under its name (PASSWORD: hunter2) is never quoted in a message with that name beside it.
            continue
        if isinstance(plugin, RegexBasedDetector):
            values |= {m.group(0) for regex in plugin.denylist for m in regex.finditer(part)}
            continue
        for line in _lines_of(part, "VALUE"):
            for secret in plugin.analyze_line(filename="stack.yaml", line=line, line_number=1):
                value = secret.secret_value or ""
                if value and (secret.type not in ENTROPY_TYPES or len(value) >= MIN_ENTROPY_LENGTH):
                    values.add(value)
    return values


def redact(text: str) -> str:
    """`text` (a message, a reason) with URL userinfo and whatever detect-secrets sees as a secret replaced."""
    text = USERINFO.sub(HIDDEN + "@", text)
    parts = _parts(text)
    values: set[str] = set()
    for index in _candidates(parts, [len(p) for p in parts]):
        values |= _secret_values(parts[index])
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, HIDDEN)
    return text
