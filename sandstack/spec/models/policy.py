"""The stack's own policy settings: what `sandstack check` holds this stack to, and its reasoned exceptions.

Organisation policy files (`sandstack check --policy FILE`) may set the same settings; theirs win.
Nothing here changes a resource: a change only changes what the check reports.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints, WithJsonSchema

from sandstack.spec.access import NEVER
from sandstack.spec.models.base import Cpus, Duration, Name, Size, StrictModel, field, text
from sandstack.spec.models.templates import Capability

RULE_ID_PATTERN = r"^[A-Z][A-Z0-9]*(-[A-Z0-9]+)*-[0-9]{3}$"
RuleId = text(RULE_ID_PATTERN, "rule ID", "a rule ID such as 'SBX-PRIV-001' or 'ORG-MEM-001'")
TARGET_PATTERN = r"^(template|pool|host)s?/[a-z]([a-z0-9-]{0,30}[a-z0-9])?$|^stack$"
Target = text(TARGET_PATTERN, "rule target", "'template/<name>', 'pool/<name>', 'host/<name>' or 'stack'")
REGISTRY_PATTERN = r"^[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?(:[0-9]+)?(/[a-z0-9._/-]+)?$"
Registry = text(REGISTRY_PATTERN, "registry", "a registry host, optionally with a path, e.g. 'registry.example.com/team'")


REASON_WORD = 3  # letters in a row that make a word


def has_a_word(text: str) -> bool:
    """Whether a text has a word: REASON_WORD letters in a row (any script; combining marks inside a word and
    invisible format characters such as a zero-width space neither count nor break it)."""
    run = 0
    for char in text:
        kind = unicodedata.category(char)
        if kind == "Cf" or (kind.startswith("M") and run):
            continue
        run = run + 1 if kind.startswith("L") else 0
        if run >= REASON_WORD:
            return True
    return False


def _reason(value: str) -> str:
    if not has_a_word(value):
        # The value is not shown: a reason is free text, and what it holds is the writer's.
        raise ValueError(f"not a valid reason: say why the finding is accepted in words (at least one word of "
                         f"{REASON_WORD} letters; spaces, punctuation, digits and invisible characters such as a "
                         f"zero-width space are not words)")
    return value


# A reason must say something: surrounding spaces are stripped, an empty one or one of only spaces is refused by
# the schema's pattern (a non-space character; located like any other error, once), and one without a word (".",
# a zero-width space) by the model.
Reason = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=500), AfterValidator(_reason),
                   WithJsonSchema({"type": "string", "maxLength": 500, "pattern": r"\S", "title": "reason",
                                   "x-hint": "a sentence saying why the finding is accepted"})]
# What a stack may set a rule's severity to. Not 'off': a stack turning a rule off by itself would pass with no
# reason given and nothing in the summary; the way to accept a finding is a suppression (rule, target, reason),
# which is counted and which `--no-suppressions` ignores. Organisation policy files, which CI passes, may set 'off'
# (sandstack.policy.org).
SEVERITY_PATTERN = r"^(error|warning)$"
Severity = Annotated[str, StringConstraints(pattern=SEVERITY_PATTERN), WithJsonSchema({
    "type": "string", "pattern": SEVERITY_PATTERN, "title": "severity", "examples": ["error", "warning"],
    "x-hint": "'error' or 'warning' (a stack cannot turn a rule off: accept a finding with a suppression in "
              "`policy.suppressions`, which needs a reason)"})]


class Ceilings(StrictModel):
    """Upper bounds for every sandbox of the stack (rules SBX-LIM-001, SBX-LIM-002, SBX-GPU-002)."""

    cpus: Cpus = field(16, description="Most CPUs a sandbox may have. Default 16.", change="none",
                       access=NEVER)
    memory: Size = field("64GiB", description="Most memory a sandbox may have. Default 64GiB.", change="none",
                         access=NEVER)
    pids: int = field(4096, description="Most processes a sandbox may have. Default 4096.", change="none",
                      access=NEVER,
                      ge=8, le=65536)
    max_lifetime: Duration = field("24h", description="Longest lifetime a sandbox may have. Default 24h.",
                                   change="none",
                                   access=NEVER)
    gpus: int = field(8, description="Most GPUs a sandbox may have. Default 8.", change="none",
                      access=NEVER, ge=0, le=16)


class Suppression(StrictModel):
    """An accepted finding: which rule, on what, and why (a suppression without a reason is an error)."""

    rule: RuleId = field(description="The rule ID, e.g. 'SBX-PORT-001'.", change="none",
                         access=NEVER)
    target: Target = field(description="What it applies to: 'template/<name>', 'pool/<name>', 'host/<name>' "
                                       "or 'stack'.", change="none",
                                       access=NEVER)
    reason: Reason = field(description="Why the finding is accepted, in words; shown in the check's summary. "
                                       "One without a word of 3 letters (blank, '.', a zero-width space) is no "
                                       "reason and is refused.", change="none",
                                       access=NEVER)


class Policy(StrictModel):
    """What `sandstack check` holds the stack to. Secure by default: only what is listed is allowed."""

    production: bool = field(False, description="A production stack: refuses `allow-all` egress and requires "
                                                "base images pinned by digest.", change="none",
                                                access=NEVER)
    untrusted: bool = field(False, description="The stack runs untrusted code: every template must use the "
                                               "'runsc' (gVisor) runtime.", change="none",
                                               access=NEVER)
    ceilings: Ceilings = field(Ceilings(), description="Upper bounds for every sandbox.", change="none",
                               access=NEVER)
    capabilities: list[Capability] = field(  # type: ignore[valid-type]
        [], description="Capabilities templates may add. Default none.", change="none",
        access=NEVER, max_length=64)
    public_ports: list[Annotated[int, Field(ge=1, le=65535)]] = field(
        [], description="Ports that may be exposed `public`. Default none (e.g. [8080]).", change="none",
        access=NEVER,
        max_length=64)
    registries: list[Registry] | None = field(  # type: ignore[valid-type]
        None, description="Registries base images may come from (e.g. 'docker.io/library'). Default: any.",
        change="none",
        access=NEVER, max_length=64)
    writable_root: list[Name] = field(
        [], description="Templates allowed a writable root filesystem. Default none.", change="none",
        access=NEVER,
        max_length=128)
    sudo: list[Name] = field([], description="Templates allowed `security.sudo`. Default none.", change="none",
                             access=NEVER,
                             max_length=128)
    private_egress: bool = field(
        False, description="Allow private, link-local and metadata addresses in allow lists.", change="none",
        access=NEVER)
    suppressions: list[Suppression] = field([], description="Accepted findings, each with a reason.",
                                            change="none",
                                            access=NEVER, max_length=256)
    severity: dict[RuleId, Severity] = field(  # type: ignore[valid-type]
        {}, description="Per-rule severity overrides, 'error' or 'warning', e.g. {SBX-NET-004: error}. A stack "
        "cannot turn a rule off ('off' is refused): accept a finding with a suppression, which names a reason, is "
        "counted in the summary and is ignored with `--no-suppressions`. Only an organisation policy file's "
        "`config.severity` may set 'off'.", change="none",
        access=NEVER)
