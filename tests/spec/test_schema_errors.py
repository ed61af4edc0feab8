"""Schema layer: one failing case per message kind, each one field changed from `fixtures/minimal.yaml`."""

from __future__ import annotations

import json

import pytest

from sandstack.spec.schema import stack_schema
from tests.spec.helpers import edit, fixture_text, lines

MINIMAL = fixture_text("minimal.yaml")
CMD = '    command: ["sh"]\n'  # line 13, the last line: cases append template fields after it (line 14)
TEMPLATE_FIELDS = ("limits, network, runtime, lifecycle, filesystem, security, env, user, workdir, base_image, "
                   "platform, snapshot, session, urls, description, extends, data, secrets, entrypoint, command, readiness, "
                   "network_profiles, ports")
NAME_HINT = "use lowercase letters, digits and '-', starting with a letter, at most 32 characters"
SIZE_HINT = "an integer number of bytes or a number with a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. '512MiB'"
CPUS_HINT = "a number of CPUs such as 1, 0.5 or '1.5', or millicores such as '500m'"


def with_template_field(line: str) -> str:
    return edit(MINIMAL, CMD, CMD + line + "\n")


# (schema keyword, id, the changed stack, the exact lines)
CASES = [
    ("type", "list-expected", with_template_field("    ports: 8080"),
     ["stack.yaml:14:12: $.templates.shell.ports: expected a list, got integer 8080"]),
    # A bare number where a duration belongs names the fix at once (it said 'quote it', then 'not a valid duration').
    ("type", "duration-without-unit", with_template_field("    lifecycle: {max_lifetime: 7200}"),
     ["stack.yaml:14:31: $.templates.shell.lifecycle.max_lifetime: 7200 has no unit: write '7200s' for 7200 seconds "
      "(that is '2h'), or use m, h or d (a duration is a number with a unit, e.g. '90s', '45m', '24h')"]),
    ("pattern", "quoted-duration-without-unit", with_template_field("    lifecycle: {idle_timeout: '30'}"),
     ["stack.yaml:14:31: $.templates.shell.lifecycle.idle_timeout: '30' has no unit: write '30s' for 30 seconds, "
      "or use m, h or d (a duration is a number with a unit, e.g. '90s', '45m', '24h')"]),
    ("type", "yaml-1.1-boolean-is-a-string", with_template_field("    filesystem: {read_only_root: yes}"),
     ["stack.yaml:14:34: $.templates.shell.filesystem.read_only_root: expected true or false, got string 'yes'"]),
    ("required", "top-level", edit(MINIMAL, "version: 1\n", ""),
     ["stack.yaml:2:1: $: missing required field 'version' (spec format version; always 1 for now)"]),
    ("additionalProperties", "did-you-mean", edit(MINIMAL, "    command:", "    comand:"),
     [f"stack.yaml:13:5: $.templates.shell.comand: unknown field 'comand'; did you mean 'command'? Allowed: "
      f"{TEMPLATE_FIELDS}"]),
    ("additionalProperties", "no-close-match", with_template_field("    zzz: 1"),
     [f"stack.yaml:14:5: $.templates.shell.zzz: unknown field 'zzz'. Allowed: {TEMPLATE_FIELDS}"]),
    ("additionalProperties", "top-level-typo", edit(MINIMAL, "templates:", "template:"),
     ["stack.yaml:2:1: $: missing required field 'templates' (sandbox templates by name)",
      "stack.yaml:10:1: $.template: unknown field 'template'; did you mean 'templates'? Allowed: version, "
      "description, hosts, profiles, defaults, templates, pools, policy"]),
    ("propertyNames", "template-name", edit(MINIMAL, "  shell:", "  Shell:"),
     [f"stack.yaml:11:3: $.templates.Shell: 'Shell' is not a valid name: {NAME_HINT}"]),
    ("propertyNames", "env-name", with_template_field("    env: {1BAD: x}"),
     ["stack.yaml:14:11: $.templates.shell.env[\"1BAD\"]: '1BAD' is not a valid variable name: use letters, "
      "digits and '_', not starting with a digit"]),
    ("enum", "few-values", with_template_field("    runtime: kata"),
     ["stack.yaml:14:14: $.templates.shell.runtime: 'kata' is not allowed; use one of 'runc', 'runsc'"]),
    ("enum", "many-values-did-you-mean", with_template_field("    security: {capabilities: [SYS_ADMN]}"),
     ["stack.yaml:14:31: $.templates.shell.security.capabilities[0]: 'SYS_ADMN' is not allowed; did you mean "
      "'SYS_ADMIN'? 41 values are allowed, e.g. 'AUDIT_CONTROL', 'AUDIT_READ', 'AUDIT_WRITE', 'BLOCK_SUSPEND', "
      "'BPF'"]),
    ("enum", "wrong-type-reported-once", with_template_field("    runtime: 5"),
     ["stack.yaml:14:14: $.templates.shell.runtime: integer 5 is not allowed; use one of 'runc', 'runsc'"]),
    ("const", "other-version", edit(MINIMAL, "version: 1", "version: 2"),
     ["stack.yaml:2:10: $.version: must be 1, got integer 2"]),
    ("const", "quoted-version-reported-once", edit(MINIMAL, "version: 1", "version: '1'"),
     ["stack.yaml:2:10: $.version: must be 1, got string '1'"]),
    ("pattern", "image-with-hint", edit(MINIMAL, "busybox:1.36", "Busybox:1.36"),
     ["stack.yaml:12:17: $.templates.shell.base_image: 'Busybox:1.36' is not a valid image reference: use an "
      "image reference such as 'python:3.12-slim' or 'repo/name@sha256:<64 hex digits>'"]),
    ("pattern", "size-in-a-union", edit(MINIMAL, "memory: 8GiB", "memory: 8 gigs"),
     [f"stack.yaml:8:15: $.hosts.local.capacity.memory: '8 gigs' is not a valid size: use {SIZE_HINT}"]),
    ("pattern", "endpoint", edit(MINIMAL, "unix:///var/run/docker.sock", "http://docker"),
     ["stack.yaml:5:15: $.hosts.local.endpoint: 'http://docker' is not a valid Docker endpoint: use "
      "'unix:///var/run/docker.sock', 'ssh://user@host[:port]' or 'tcp://host:port' (with tls)"]),
    ("minimum", "pids", with_template_field("    limits: {pids: 4}"),
     ["stack.yaml:14:20: $.templates.shell.limits.pids: 4 is below the minimum 8"]),
    ("maximum", "port", with_template_field("    ports: [{port: 70000}]"),
     ["stack.yaml:14:20: $.templates.shell.ports[0].port: 70000 is above the maximum 65535"]),
    ("exclusiveMinimum", "zero-cpus", edit(MINIMAL, "cpus: 4", "cpus: 0"),
     ["stack.yaml:7:13: $.hosts.local.capacity.cpus: 0 is not above 0"]),
    ("minLength", "empty-setup-step", with_template_field("    snapshot: {version: '1', setup: ['']}"),
     ["stack.yaml:14:38: $.templates.shell.snapshot.setup[0]: '' has 0 characters; at least 1 allowed"]),
    ("maxLength", "long-description-is-clipped", with_template_field("    description: " + "x" * 501),
     ["stack.yaml:14:18: $.templates.shell.description: string '" + "x" * 57 + "...' has 501 characters; "
      "at most 500 allowed"]),
    ("minItems", "empty-command", edit(MINIMAL, CMD, "    command: []\n"),
     ["stack.yaml:13:14: $.templates.shell.command: has 0 items; at least 1 allowed"]),
    ("maxItems", "ssh-opts", edit(MINIMAL, "      disk: 20GiB\n",
                                  "      disk: 20GiB\n    ssh_opts: [" + ", ".join(["-v"] * 33) + "]\n"),
     ["stack.yaml:10:15: $.hosts.local.ssh_opts: has 33 items; at most 32 allowed"]),
    ("minProperties", "no-templates", edit(MINIMAL, "templates:\n  shell:\n    base_image: busybox:1.36\n" + CMD,
                                           "templates: {}\n"),
     ["stack.yaml:10:12: $.templates: has 0 entries; at least 1 required"]),
    ("maxProperties", "too-many-profiles",
     edit(MINIMAL, "templates:\n", "profiles:\n" + "".join(f"  p{i}: {{}}\n" for i in range(65)) + "templates:\n"),
     ["stack.yaml:11:3: $.profiles: has 65 entries; at most 64 allowed"]),
    ("anyOf", "limits-is-an-integer", with_template_field("    limits: 5"),
     ["stack.yaml:14:13: $.templates.shell.limits: expected a string or a mapping, got integer 5"]),
    ("anyOf", "env-value-is-a-boolean", with_template_field("    env: {A: true}"),
     ["stack.yaml:14:14: $.templates.shell.env.A: expected a string or a mapping, got boolean true"]),
    ("anyOf", "size-is-a-float", edit(MINIMAL, "memory: 8GiB", "memory: 1.5"),
     [f"stack.yaml:8:15: $.hosts.local.capacity.memory: expected size ({SIZE_HINT}), got number 1.5"]),
    ("anyOf", "cpus-is-a-list", edit(MINIMAL, "cpus: 4", "cpus: [4]"),
     [f"stack.yaml:7:13: $.hosts.local.capacity.cpus: expected CPU amount ({CPUS_HINT}), got a list"]),
    ("anyOf", "string-branch-explained", with_template_field("    limits: Small"),
     [f"stack.yaml:14:13: $.templates.shell.limits: 'Small' is not a valid name: {NAME_HINT}"]),
    ("anyOf", "mapping-branch-explained", with_template_field("    limits: {mem: 1GiB}"),
     ["stack.yaml:14:14: $.templates.shell.limits.mem: unknown field 'mem'; did you mean 'memory'? Allowed: cpus, "
      "memory, disk, pids, open_files, gpus, profile"]),
    # Past the schema, the models parse units; their range errors point at the value, not the union.
    ("model", "size-out-of-range-in-a-union", with_template_field("    limits: {memory: 99999999999TiB}"),
     ["stack.yaml:14:22: $.templates.shell.limits.memory: '99999999999TiB' is out of range: sizes go from 0 to "
      "1 EiB"]),
    ("model", "cpus-below-a-millicore", with_template_field("    limits: {cpus: '0.0001'}"),
     ["stack.yaml:14:20: $.templates.shell.limits.cpus: '0.0001' is below the smallest CPU amount, 0.001 (1m)"]),
    ("model", "5000-digit-size-is-clipped", with_template_field("    limits: {memory: " + "9" * 5000 + "TiB}"),
     ["stack.yaml:14:22: $.templates.shell.limits.memory: '" + "9" * 56 + "... is out of range: sizes go from 0 "
      "to 1 EiB"]),
    ("model", "duration-out-of-range", with_template_field("    lifecycle: {max_lifetime: 3651d}"),
     ["stack.yaml:14:31: $.templates.shell.lifecycle.max_lifetime: '3651d' is out of range: durations go up to "
      "10 years"]),
]


@pytest.mark.parametrize(("text", "expected"), [c[2:] for c in CASES], ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_schema_message(check, text: str, expected: list[str]) -> None:
    diagnostics = check(text)
    assert lines(diagnostics) == expected
    assert {d.rule for d in diagnostics} == {"schema"}


# Keywords that only structure the schema or annotate it; they never fail on their own.
STRUCTURAL = {"$schema", "$id", "$defs", "$ref", "title", "description", "default", "examples", "properties",
              "items", "x-change", "x-hint"}


def _keywords(node: object, found: set[str]) -> set[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("properties", "$defs"):
                for sub in value.values():
                    _keywords(sub, found)
                continue
            found.add(key)
            if key not in ("default", "examples", "const", "enum", "required"):
                _keywords(value, found)
    elif isinstance(node, list):
        for item in node:
            _keywords(item, found)
    return found


def test_every_failing_keyword_in_the_schema_has_a_case() -> None:
    used = _keywords(stack_schema(), set()) - STRUCTURAL
    covered = {c[0] for c in CASES}
    # additionalProperties also carries the value schema of maps; its message case is covered above.
    assert sorted(used - covered) == [], "add a case to CASES for each schema keyword that can fail"


def test_wrong_types_everywhere_are_all_reported_at_once(check) -> None:
    text = ("version: one\ndescription: [a]\nhosts: [local]\nprofiles: small\ndefaults: 5\ntemplates: true\n"
            "pools: \"x\"\n")
    assert lines(check(text)) == [
        "stack.yaml:1:10: $.version: must be 1, got string 'one'",
        "stack.yaml:2:14: $.description: expected a string, got a list",
        "stack.yaml:3:8: $.hosts: expected a mapping, got a list",
        "stack.yaml:4:11: $.profiles: expected a mapping, got string 'small'",
        "stack.yaml:5:11: $.defaults: expected a mapping, got integer 5",
        "stack.yaml:6:12: $.templates: expected a mapping, got boolean true",
        "stack.yaml:7:8: $.pools: expected a mapping, got string 'x'",
    ]


def test_wrong_types_in_nested_fields(check) -> None:
    text = ("version: 1\nhosts:\n  local:\n    endpoint: 5\n    capacity: {cpus: 1, memory: {a: 1}, disk: true}\n"
            "    labels: [a]\ntemplates:\n  shell:\n    base_image: 3.12\n    command: sh\n    network: deny-all\n")
    assert lines(check(text)) == [
        "stack.yaml:4:15: $.hosts.local.endpoint: expected a string, got integer 5: quote it",
        f"stack.yaml:5:33: $.hosts.local.capacity.memory: expected size ({SIZE_HINT}), got a mapping",
        f"stack.yaml:5:47: $.hosts.local.capacity.disk: expected size ({SIZE_HINT}), got boolean true",
        "stack.yaml:6:13: $.hosts.local.labels: expected a mapping, got a list",
        "stack.yaml:9:17: $.templates.shell.base_image: expected a string, got number 3.12: quote it",
        "stack.yaml:10:14: $.templates.shell.command: expected a list, got string 'sh'",
        "stack.yaml:11:14: $.templates.shell.network: expected a mapping, got string 'deny-all'",
    ]


def test_explicit_null_is_refused_where_a_field_is_optional(check) -> None:
    assert lines(check(with_template_field("    runtime: null"))) == [
        "stack.yaml:14:14: $.templates.shell.runtime: null is not allowed; use one of 'runc', 'runsc'"
    ]


def test_schema_messages_name_the_value_even_when_long(check) -> None:
    long_key = "k" * 100
    (line,) = lines(check(with_template_field(f"    {long_key}: 1")))
    assert line.startswith(f"stack.yaml:14:5: $.templates.shell.{long_key}: unknown field string '{'k' * 57}...'.")


def test_schema_json_is_what_the_validator_uses() -> None:
    from pathlib import Path

    from tests.spec.helpers import REPO

    committed = json.loads(Path(REPO / "schemas" / "stack.schema.json").read_text())
    assert committed == stack_schema()
