"""Organisation rules as data: cerberus schemas a platform team writes in YAML, applied to a flat view of each
resolved template, pool or host. A policy file is read with the spec's own safe loader, so a broken one gets
the same located errors (FILE:LINE:COL) as a broken stack.

    rules:
      - id: ORG-MEM-001
        name: memory-range
        applies_to: template            # template | pool | host
        severity: error                 # error | warning
        description: Checks whether memory is between 512MiB and 8GiB, in an even number of MiB.
        message: "Template '{name}' must have between 512MiB and 8GiB of memory, in an even number of MiB"
        remediation: Set limits.memory to e.g. 2GiB.
        schema:
          memory_mib: {min: 512, max: 8192, check_with: even}
    config: {public_ports: [8080]}      # optional: the same settings as a stack's `policy:`; the file's win
    prices: prices.yaml                 # optional: the platform's price list, relative to this file

Capacity bounds (sandstack.spec.reserve: what the pools reserve at their on-demand ceiling): a `host` rule may
bound a host's total (`reserved_cpus`, `reserved_memory_mib`, `reserved_disk_mib`, `reserved_gpus`,
`reserved_sandboxes`), a `stack` rule the stack's, and a `change` rule a change's size (`added_cpus`,
`added_memory_mib`, …: head minus base), which `sandstack diff --policy FILE` applies (`check` sees no change).

A message names its target with {name} (nothing else: other placeholders are refused when the file is loaded;
write a literal brace as '{{'). `config.severity` may set a rule 'off', which a stack's own `policy:` may not.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from string import Formatter
from typing import Any, Literal

from cerberus import Validator
from cerberus.schema import SchemaError
from pydantic import ValidationError

from sandstack.policy.builtin import RULES, public_url_ports
from sandstack.policy.findings import Rule, Violation
from sandstack.spec.access import NEVER
from sandstack.spec.errors import Diagnostic, SpecError, format_path
from sandstack.spec.loader import Document, load
from sandstack.spec.models import Ceilings, Policy
from sandstack.spec.models.base import field as spec_field
from sandstack.spec.models.policy import RuleId
from sandstack.spec.reserve import Amount, reservations
from sandstack.spec.resolve import ResolvedStack, ResolvedTemplate
from sandstack.spec.schema_errors import describe
from sandstack.spec.units import MIB

TARGETS = ("template", "pool", "host", "stack", "change")
# What a pool reserves at its on-demand ceiling, summed per host or for the stack; a change's rule its difference.
RESERVED = {"cpus": "cpus", "memory_mib": "memory", "disk_mib": "disk", "gpus": "gpus", "sandboxes": "sandboxes"}
CAPACITY_FIELDS = frozenset({f"reserved_{k}" for k in RESERVED} | {f"added_{k}" for k in RESERVED})
# Where each field of a view is written in the stack file (under the template, pool or host).
VIEW_PATHS: dict[str, dict[str, tuple]] = {
    "template": {"cpus": ("limits", "cpus"), "memory_mib": ("limits", "memory"), "disk_mib": ("limits", "disk"),
                 "pids": ("limits", "pids"), "open_files": ("limits", "open_files"), "gpus": ("limits", "gpus"),
                 "max_lifetime_s": ("lifecycle", "max_lifetime"), "idle_timeout_s": ("lifecycle", "idle_timeout"),
                 "runtime": ("runtime",), "user": ("user",), "egress": ("network", "egress"),
                 "log": ("network", "log"), "allow": ("network", "allow"), "network_profiles": ("network_profiles",),
                 "public_ports": ("ports",),
                 "host_ports": ("ports",), "url_ports": ("ports",), "privileged": ("security", "privileged"),
                 "capabilities": ("security", "capabilities"), "base_image": ("base_image",),
                 "read_only_root": ("filesystem", "read_only_root"),
                 "exec_max_timeout_s": ("session", "exec_max_timeout"),
                 "exec_output_limit_mib": ("session", "exec_output_limit")},
    "pool": {"template": ("template",), "replicas": ("replicas",), "hosts": ("hosts",)},
    "host": {"endpoint": ("endpoint",), "cpus": ("capacity", "cpus"), "memory_mib": ("capacity", "memory"),
             "disk_mib": ("capacity", "disk"), "gpus": ("capacity", "gpus"),
             **{f"reserved_{k}": () for k in RESERVED}},
    # The stack's pools reserve it: a bound exceeded is located at `pools`.
    "stack": {f"reserved_{k}": () for k in RESERVED},
    "change": {f"added_{k}": () for k in RESERVED},
}

FILE_SCHEMA = {
    "rules": {"type": "list", "required": True, "schema": {"type": "dict", "schema": {
        "id": {"type": "string", "required": True, "regex": r"[A-Z][A-Z0-9]*(-[A-Z0-9]+)*-[0-9]{3}"},
        "name": {"type": "string", "required": True, "regex": r"[a-z][a-z0-9]*(-[a-z0-9]+)*"},
        "applies_to": {"type": "string", "required": True, "allowed": list(TARGETS)},
        "severity": {"type": "string", "required": True, "allowed": ["error", "warning"]},
        "description": {"type": "string", "required": True, "regex": r"Checks whether .+"},
        "message": {"type": "string", "required": True},
        "remediation": {"type": "string", "required": True},
        "schema": {"type": "dict", "required": True, "keysrules": {"type": "string"}},
    }}},
    "config": {"type": "dict"},
    "prices": {"type": "string", "empty": False},
}


# What a rule's `message` may name: the template's, pool's or host's name. Anything else in braces would fail
# when the rule fires, so it is refused when the file is loaded.
PLACEHOLDERS = ("name",)


class PolicyConfig(Policy):
    """A policy file's `config:`: the settings of a stack's `policy:`, and one more power. The organisation, which
    chooses the policy files CI passes, may turn a rule off; a stack may not (it suppresses, with a reason)."""

    severity: dict[RuleId, Literal["error", "warning", "off"]] = spec_field(  # type: ignore[valid-type]
        {}, description="Per-rule severity overrides, e.g. {SBX-NET-004: error, SBX-PRIV-003: off}.", change="none",
        access=NEVER)


class OrgValidator(Validator):
    """Cerberus with the checks organisation rules need beyond its own."""

    def _check_with_even(self, field_name: str, value: Any) -> None:
        if isinstance(value, (int, float)) and int(value) % 2:
            self._error(field_name, "must be even")


@dataclass(frozen=True)
class OrgRule:
    rule: Rule
    applies_to: str
    message: str
    schema: dict
    path: tuple  # where the rule is in its file
    at: tuple[int, int] = (1, 1)  # line and column of its ID, for errors naming another file's rule


@dataclass
class PolicyFile:
    file: str
    rules: list[OrgRule] = field(default_factory=list)
    config: PolicyConfig = field(default_factory=PolicyConfig)  # validated; only the keys it sets count
    prices: str | None = None  # the price list's path (relative to the policy file, made relative to the cwd)


def _diagnostic(doc: Document, path: tuple, message: str, key: bool = False) -> Diagnostic:
    return doc.diagnostic(path, message, "policy-file", key=key)


def _walk_errors(tree: Any, path: tuple) -> list[tuple[tuple, str]]:
    """Cerberus' nested error dict as (path, message) pairs."""
    out = []
    if isinstance(tree, dict):
        for key, value in tree.items():
            out += _walk_errors(value, (*path, key))
    elif isinstance(tree, list):
        for item in tree:
            out += _walk_errors(item, path) if isinstance(item, (dict, list)) else [(path, str(item))]
    return out


def message_problem(message: str) -> str | None:
    """Why a rule's message cannot be shown (a placeholder other than {name}, a lone brace), or None."""
    allowed = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
    fix = f"the only placeholder is {allowed} (the name of the template, pool or host at fault); write a " \
          "literal brace as '{{' or '}}'"
    try:
        fields = [(name, conversion, spec) for _, name, spec, conversion in Formatter().parse(message)
                  if name is not None]
    except ValueError as error:  # a lone '{' or '}'
        return f"{message!r}: {error}; {fix}"
    for name, conversion, spec in fields:
        if name not in PLACEHOLDERS or conversion or spec:
            shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            return f"{shown!r} is not a placeholder of a message: {fix}"
    return None


def render_message(message: str, values: dict[str, Any]) -> str:
    """A rule's message with its placeholders filled; load_policy_file refused any other, so this cannot fail."""
    if message_problem(message) is not None:  # never reached from a loaded file: shown as written, not a crash
        return message
    return message.format(**{p: values.get(p, "") for p in PLACEHOLDERS})


def _config(doc: Document) -> tuple[PolicyConfig, list[Diagnostic]]:
    """The file's `config:`, validated like a stack's `policy:` and located at the line of each bad value."""
    try:
        return PolicyConfig.model_validate(doc.data.get("config") or {}), []
    except ValidationError as error:
        return PolicyConfig(), [_diagnostic(doc, ("config", *e["loc"]), _config_message(e),
                                            key=e["type"] == "extra_forbidden") for e in error.errors()]


def _config_message(error: dict) -> str:
    """A pydantic error on `config:` naming the bad value (or key) and what is allowed."""
    loc = error["loc"]
    if error["type"] == "extra_forbidden":
        model = Ceilings if loc[:1] == ("ceilings",) and len(loc) == 2 else PolicyConfig
        return f"unknown setting {loc[-1]!r}; use one of {', '.join(model.model_fields)}"
    return f"{describe(error['input'])}: {error['msg'].removeprefix('Value error, ')}"


def load_policy_file(path: str | os.PathLike[str]) -> PolicyFile:
    """The rules of one policy file, or SpecError with every problem located in it."""
    doc = load(path, what="a policy file")
    if not isinstance(doc.data, dict):
        raise SpecError([_diagnostic(doc, (), "a policy file is a mapping with `rules` (and optionally `config`)")])
    checker = Validator(FILE_SCHEMA)
    if not checker.validate(doc.data):
        raise SpecError(sorted({_diagnostic(doc, p, m) for p, m in _walk_errors(checker.errors, ())}))
    config, problems = _config(doc)
    prices = doc.data.get("prices")
    out = PolicyFile(doc.file, config=config,
                     prices=None if prices is None else os.path.join(os.path.dirname(str(path)), prices))
    seen: set[str] = set()
    for index, item in enumerate(doc.data["rules"]):
        where = ("rules", index)
        if item["id"] in seen:
            problems.append(_diagnostic(doc, (*where, "id"), f"rule ID {item['id']!r} is declared twice"))
        elif item["id"] in RULES:
            problems.append(_diagnostic(doc, (*where, "id"), f"rule ID {item['id']!r} is a built-in rule's "
                                        f"({RULES[item['id']].name}); give the organisation's rule its own ID"))
        seen.add(item["id"])
        problem = message_problem(item["message"])
        if problem:
            problems.append(_diagnostic(doc, (*where, "message"), problem))
        unknown = sorted(set(item["schema"]) - set(VIEW_PATHS[item["applies_to"]]) - {"name"})
        if unknown:
            problems.append(_diagnostic(doc, (*where, "schema", unknown[0]), f"{unknown[0]!r} is not a field of a "
                                        f"{item['applies_to']}; use one of {', '.join(sorted(VIEW_PATHS[item['applies_to']]))}", key=True))
            continue
        try:
            OrgValidator(item["schema"])
        except SchemaError as error:
            problems.append(_diagnostic(doc, (*where, "schema"), f"not a valid cerberus schema: {error}"))
            continue
        rule = Rule(item["id"], item["name"], item["description"], item["severity"], item["remediation"], doc.file)
        out.rules.append(OrgRule(rule, item["applies_to"], item["message"], item["schema"], where,
                                 doc.position((*where, "id"))))
    if problems:
        raise SpecError(sorted(problems))
    return out


def duplicate_ids(files: list[PolicyFile]) -> list[Diagnostic]:
    """A rule ID that two policy files declare, located in the later one (a finding must name one rule, with one
    message and one fix). Within a file and against the built-in rules, load_policy_file refuses it already."""
    first: dict[str, tuple[str, OrgRule]] = {}
    out = []
    for policy_file in files:
        for org in policy_file.rules:
            if org.rule.id not in first:
                first[org.rule.id] = (policy_file.file, org)
                continue
            file, earlier = first[org.rule.id]
            out.append(Diagnostic(policy_file.file, *org.at, format_path((*org.path, "id")),
                                  f"rule ID {org.rule.id!r} is already declared in {file}:{earlier.at[0]}:"
                                  f"{earlier.at[1]}; give each rule its own ID", "policy-file"))
    return out


def template_view(t: ResolvedTemplate, public_urls: tuple[int, ...] = ()) -> dict[str, Any]:
    """A template as organisation rules see it. `public_ports` are the ports reachable from anywhere: published
    `public`, and the `url` ports a public ingress serves (`public_urls`), as SBX-PORT-001 counts them;
    `url_ports` are all its url ports. With network profiles, `egress`, `log` and `allow` are the loosest of them
    (the widest mode, every profile's allow entries, logged only if all are): a rule holds for every profile."""
    n = t.network
    return {
        "name": t.name, "cpus": t.limits.cpus, "memory_mib": t.limits.memory // MIB, "disk_mib": t.limits.disk // MIB,
        "pids": t.limits.pids, "open_files": t.limits.open_files, "gpus": t.limits.gpus.count if t.limits.gpus else 0,
        "max_lifetime_s": t.lifecycle.max_lifetime, "idle_timeout_s": t.lifecycle.idle_timeout,
        "runtime": t.runtime, "user": t.user, "egress": n.egress, "log": n.log, "allow": [str(a) for a in n.allow],
        "network_profiles": [name for name, _ in t.network_profiles],
        "public_ports": [p.port for p in t.ports
                         if p.exposure == "public" or (p.exposure == "url" and p.port in public_urls)],
        "url_ports": [p.port for p in t.ports if p.exposure == "url"],
        "host_ports": [p.port for p in t.ports if p.exposure == "host"], "privileged": t.privileged,
        "capabilities": list(t.capabilities), "base_image": t.base_image, "read_only_root": t.read_only_root,
        # The runtime's exec bounds (`session`): an org rule can cap how long and how much a session's command runs.
        "exec_max_timeout_s": t.session.exec_max_timeout, "exec_output_limit_mib": t.session.exec_output_limit / MIB,
    }


def _reserved(amount: Amount, prefix: str) -> dict[str, Any]:
    return {f"{prefix}{k}": (amount.get(dim) // MIB if k.endswith("_mib") else
                             round(amount.get(dim), 3) if dim == "cpus" else int(amount.get(dim)))
            for k, dim in RESERVED.items()}


def change_view(old: ResolvedStack, new: ResolvedStack) -> dict[str, Any]:
    """A change as `change` rules see it: what the stack reserves more (or less) at the ceiling, head − base."""
    return {"name": "change", **_reserved(reservations(new).ceiling - reservations(old).ceiling, "added_")}


def views(spec: ResolvedStack, applies_to: str) -> list[tuple[str, tuple, dict[str, Any]]]:
    """(target, its path in the stack file, its view) of every template, pool or host, or of the stack (none of a
    change: `change_violations`)."""
    if applies_to == "change":
        return []
    if applies_to == "stack":
        return [("stack", ("pools",), {"name": "stack", **_reserved(reservations(spec).ceiling, "reserved_")})]
    if applies_to == "template":
        return [(f"template/{n}", ("templates", n), template_view(t, public_url_ports(spec, n)))
                for n, t in spec.templates.items()]
    if applies_to == "pool":
        return [(f"pool/{n}", ("pools", n), {"name": n, "template": p.template, "replicas": p.replicas,
                                              "hosts": list(p.hosts)}) for n, p in spec.pools.items()]
    reserved = reservations(spec).hosts
    return [(f"host/{n}", ("hosts", n), {
        "name": n, "endpoint": h.endpoint, "cpus": h.capacity.cpus, "memory_mib": h.capacity.memory // MIB,
        "disk_mib": h.capacity.disk // MIB, "gpus": sum(g.count for g in h.capacity.gpus),
        **_reserved(reserved[n].ceiling, "reserved_")})
        for n, h in spec.hosts.items()]


# Cerberus' rules that change a document before it is checked: a schema without any is checked as the view is,
# without cerberus' normalisation pass (a copy of the schema per document: most of the organisation rules' time).
NORMALIZING = frozenset({"coerce", "default", "default_setter", "rename", "rename_handler", "purge_unknown",
                         "purge_readonly"})


def _normalizes(schema: Any) -> bool:
    if isinstance(schema, dict):
        return any(key in NORMALIZING or _normalizes(value) for key, value in schema.items())
    if isinstance(schema, (list, tuple)):
        return any(_normalizes(item) for item in schema)
    return False


def capacity_rules(files: list[PolicyFile]) -> list[OrgRule]:
    """The rules that bound capacity: every `change` rule, and `host` and `stack` rules on reserved totals."""
    return [org for policy in files for org in policy.rules
            if org.applies_to == "change" or set(org.schema) & CAPACITY_FIELDS]


def change_violations(old: ResolvedStack, new: ResolvedStack, files: list[PolicyFile]) -> list[tuple[OrgRule, str]]:
    """Each capacity rule the change breaks, with its message: `change` rules on the change's size, `host` and
    `stack` rules on the head's totals where the base kept them (`sandstack diff --policy`, under `--fail-on
    capacity`)."""
    out = []
    for org in capacity_rules(files):
        if org.applies_to == "change":
            out += [(org, message) for _, _, message in _broken(org, [("change", (), change_view(old, new))])]
            continue
        # A total the base already broke is `check`'s finding, not this change's: only a new breach counts.
        broken_before = {target for target, _, _ in _broken(org, views(old, org.applies_to))}
        out += [(org, message) for target, _, message in _broken(org, views(new, org.applies_to))
                if target not in broken_before]
    return out


def _broken(org: OrgRule, targets: list[tuple[str, tuple, dict[str, Any]]]) -> list[tuple[str, tuple, str]]:
    """(target, path, message) of every field of every target the rule's schema refuses."""
    checker = OrgValidator(org.schema, allow_unknown=True)
    normalize = _normalizes(org.schema)
    out = []
    for target, base, view in targets:
        if checker.validate(view, normalize=normalize):
            continue
        for field_name, messages in sorted(checker.errors.items()):
            detail = "; ".join(m if isinstance(m, str) else str(m) for m in messages)
            rel = VIEW_PATHS[org.applies_to].get(field_name, ())
            message = render_message(org.message, view) + f" ({field_name} {view.get(field_name)!r}: {detail})."
            out.append((target, (*base, *rel), message))
    return out


def org_violations(spec: ResolvedStack, files: list[PolicyFile]) -> list[Violation]:
    out = []
    for policy in files:
        for org in policy.rules:
            out += [Violation(org.rule.id, target, path, message)
                    for target, path, message in _broken(org, views(spec, org.applies_to))]
    return out

