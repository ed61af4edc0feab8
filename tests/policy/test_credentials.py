"""SBX-SEC-001 and SBX-SEC-002 beyond the one-field cases: a suspect env name is never printed (not even in a
JSON path), every kind of secret reference is scanned, and a commit id under a commit-id name is no credential."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandstack.policy.runner import check
from sandstack.spec.models import Stack
from sandstack.spec.models.base import CONFIG_KEY_PATTERN
from sandstack.spec.walk import model_fields
from sandstack.tooling.cli import main
from tests.policy.cases import changed
from tests.policy.test_builtin_rules import value_position
from testbed.specs import host, write_spec

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example access key id
PASTED = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # fits a config key's pattern, and is a GitHub token
NOT_SHOWN = "must name a config key in {}, not a value that looks like a credential (not shown)."
COMMIT = "9fceb02d0ae598e95dc970b74767f19372d61af8"


def _findings(tmp_path: Path, data: dict) -> tuple[Path, list]:
    path = write_spec(tmp_path, data, lock=True)  # locked, as a committed stack (SBX-ADDR-001 is tested apart)
    report = check([str(path)], [])
    assert report.invalid == [] and report.unreadable == []
    return path, report.active()


@pytest.mark.parametrize("value", ["x", {"secret": "apiKey"}])
def test_a_credential_as_an_env_name_is_never_printed_in_any_format(value, tmp_path, capsys):
    data = changed((f"templates.agent.env.{AWS_KEY}", value))
    path, findings = _findings(tmp_path / "direct", data)
    assert [(f.rule, f.path, f.message) for f in findings] == [
        ("SBX-SEC-001", "$.templates.agent.env",
         "Template 'agent' must not hold a credential in an env entry's name (name not shown).")]
    assert (findings[0].line, findings[0].column) == value_position(path.read_text(), "$.templates.agent.env")
    for fmt in ("text", "json", "github", "sarif"):
        code = main(["check", str(path), "--format", fmt])
        out = capsys.readouterr()
        assert code == 1 and "SBX-SEC-001" in out.out + out.err
        assert AWS_KEY not in out.out + out.err and AWS_KEY[:8] not in out.out + out.err


def test_a_pasted_secret_key_under_a_credential_name_shows_neither(tmp_path, capsys):
    data = changed((f"templates.agent.env.{AWS_KEY}", {"secret": PASTED}))
    _, findings = _findings(tmp_path, data)
    assert [(f.rule, f.path, f.message) for f in findings] == [
        ("SBX-SEC-001", "$.templates.agent.env",
         "Template 'agent' must not hold a credential in an env entry's name (name not shown)."),
        ("SBX-SEC-002", "$.templates.agent.env", "Template 'agent' " + NOT_SHOWN.format(
            "the secret reference of an env entry whose name is not shown"))]


TLS = {"ca": {"secret": "dockerCa"}, "cert": {"secret": "dockerCert"}, "key": {"secret": "dockerKey"}}
REFERENCES = [
    ([("hosts.local.runtime", {"token": {"secret": PASTED}})], "host/local", "$.hosts.local.runtime.token.secret",
     "Host 'local' " + NOT_SHOWN.format("runtime.token.secret")),
    ([("hosts.local.runtime", {"token": {"secret": "runtimeToken"},
                               "tokens": {"tenant": {"secret": PASTED, "pools": ["agent"]}}})],
     "host/local", "$.hosts.local.runtime.tokens.tenant.secret",
     "Host 'local' " + NOT_SHOWN.format("runtime.tokens.tenant.secret")),
    ([("hosts.local.runtime", {"token": {"secret": "runtimeToken"}, "ssh": {"host_key": {"secret": PASTED}}})],
     "host/local", "$.hosts.local.runtime.ssh.host_key.secret",
     "Host 'local' " + NOT_SHOWN.format("runtime.ssh.host_key.secret")),
    ([("hosts.local.runtime", {"token": {"secret": "runtimeToken"}, "snapshot_store": {
        "registry": "https://registry.internal", "username": "snapshots", "password": {"secret": PASTED}}})],
     "host/local", "$.hosts.local.runtime.snapshot_store.password.secret",
     "Host 'local' " + NOT_SHOWN.format("runtime.snapshot_store.password.secret")),
    ([("hosts.local.runtime", {"token": {"secret": "runtimeToken"}, "snapshot_store": {
        "registry": "https://registry.internal", "username": "snapshots", "password": {"secret": "storePassword"},
        "ca": {"secret": AWS_KEY}}})],
     "host/local", "$.hosts.local.runtime.snapshot_store.ca.secret",
     "Host 'local' " + NOT_SHOWN.format("runtime.snapshot_store.ca.secret")),
    ([("hosts.local.ingress", {"domain": "sb.example.com", "tls": {"cert": {"secret": PASTED},
                                                                   "key": {"secret": "ingressKey"}}})],
     "host/local", "$.hosts.local.ingress.tls.cert.secret", "Host 'local' " + NOT_SHOWN.format("ingress.tls.cert.secret")),
    ([("hosts.local.ingress", {"domain": "sb.example.com", "tls": {"cert": {"secret": "ingressCert"},
                                                                   "key": {"secret": AWS_KEY}}})],
     "host/local", "$.hosts.local.ingress.tls.key.secret", "Host 'local' " + NOT_SHOWN.format("ingress.tls.key.secret")),
    ([("hosts.local", host("tcp://docker.example.com:2376", tls={**TLS, "key": {"secret": PASTED}}))],
     "host/local", "$.hosts.local.tls.key.secret", "Host 'local' " + NOT_SHOWN.format("tls.key.secret")),
    ([("templates.agent.secrets", [{"secret": PASTED, "path": "/run/secrets/token"}])], "template/agent",
     "$.templates.agent.secrets[0].secret", "Template 'agent' " + NOT_SHOWN.format("secrets[0].secret")),
    ([("defaults", {"env": {"API": {"secret": PASTED}}})], "stack", "$.defaults.env.API.secret",
     "The stack defaults " + NOT_SHOWN.format("env.API.secret")),
]


@pytest.mark.parametrize(("changes", "target", "where", "message"), REFERENCES, ids=[r[2] for r in REFERENCES])
def test_every_kind_of_secret_reference_is_scanned(changes, target, where, message, tmp_path):
    path, findings = _findings(tmp_path, changed(*changes))
    assert [(f.rule, f.target, f.path, f.message) for f in findings] == [("SBX-SEC-002", target, where, message)]
    assert (findings[0].line, findings[0].column) == value_position(path.read_text(), where)


def test_the_cases_cover_every_secret_reference_the_models_have():
    # The scan finds references by type (every config-key field); this lists them so that a new kind of
    # reference in the models gets its case above.
    keys = {p for p, info in model_fields(Stack).items()
            if any(getattr(m, "pattern", None) == CONFIG_KEY_PATTERN for m in info.metadata)}
    assert keys == {"hosts.*.tls.ca.secret", "hosts.*.tls.cert.secret", "hosts.*.tls.key.secret",
                    "hosts.*.ingress.tls.cert.secret", "hosts.*.ingress.tls.key.secret",
                    "hosts.*.runtime.token.secret", "hosts.*.runtime.tokens.*.secret",
                    "hosts.*.runtime.ssh.host_key.secret", "hosts.*.runtime.snapshot_store.password.secret",
                    "hosts.*.runtime.snapshot_store.ca.secret", "defaults.env.*.secret", "templates.*.env.*.secret",
                    "templates.*.secrets[].secret"}


@pytest.mark.parametrize(("name", "value", "flagged"), [
    ("GIT_COMMIT", COMMIT, False),
    ("GITHUB_SHA", COMMIT, False),
    ("SOURCE_REVISION", COMMIT + COMMIT[:24], False),  # a SHA-256 repository's 64 hex digits
    ("MODE", COMMIT, True),  # the same hex under another name is still high-entropy text
    ("GIT_COMMIT", COMMIT.upper(), True),  # not how git prints an id
    ("GIT_COMMIT", PASTED, True),  # a token format under a commit-id name
])
def test_a_commit_id_under_a_commit_id_name_is_not_a_credential(name, value, flagged, tmp_path):
    _, findings = _findings(tmp_path, changed((f"templates.agent.env.{name}", value)))
    assert [(f.rule, f.path) for f in findings] == ([("SBX-SEC-001", f"$.templates.agent.env.{name}")] if flagged
                                                    else [])


def test_json_output_carries_no_pasted_value(tmp_path, capsys):
    data = changed(("hosts.local.runtime", {"token": {"secret": PASTED}}))
    path = write_spec(tmp_path, data, lock=True)
    assert main(["check", str(path), "--format", "json"]) == 1
    out = capsys.readouterr().out
    assert PASTED not in out and [f["rule"] for f in json.loads(out)["findings"]] == ["SBX-SEC-002"]
