"""No output of any command, in any format, holds a value `check` flags or a value in a secret-bearing position:
validate, check, preview and diff × every format each has, over a corpus of specs with realistic planted
credentials (tests/policy/planted.py), stdout and stderr, whole or in a recognisable piece."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandstack.spec.credentials import (ANY, CREDENTIAL_PREFIXES, MIXED, PLACEHOLDER, UPPER, looks_like_credential,
                                        secret_named)
from sandstack.tooling.cli import main
from tests.policy.cases import CLEAN, changed
from tests.policy.planted import (AWS_KEY_ID, AWS_SECRET, BASE64_TOKEN, GITHUB, JWT, PASSWORD, PEM, SLACK, SLACK_BOT,
                                  SLACK_BOT_ROTATED, leaked, pieces)
from testbed.specs import host, write_spec

FORMATS = {"validate": ("text", "json", "github"), "check": ("text", "json", "github", "sarif"),
           "preview": ("text", "json", "markdown"), "diff": ("text", "json", "markdown")}
REGISTRY = "registry.example.com/team/agent:1"

# A valid spec holding a credential in every place a user writes one: check flags each; preview and diff run.
LEAKY = changed(
    ("templates.agent.env.NOTES", SLACK), ("templates.agent.env.DEPLOY_KEY", PEM),
    ("templates.agent.env.SESSION", JWT), ("templates.agent.env.S3_A", AWS_KEY_ID),
    ("templates.agent.env.S3_B", AWS_SECRET), ("templates.agent.env.WRAPPED", BASE64_TOKEN),
    ("templates.agent.env.GITHUB_TOKEN", {"secret": GITHUB}),  # a pasted token where a config key belongs
    ("templates.agent.command", ["sh", "-c", f"agent --token '{GITHUB}'"]),
    ("templates.agent.snapshot.setup", ["pip install requests", f"echo '{JWT}' > /etc/session"]),
    ("templates.agent.readiness", {"command": ["curl", "-H", f"X-Token: {BASE64_TOKEN}", "http://127.0.0.1:8080/"]}),
    ("templates.agent.description", f"Posts to {SLACK}"),
    ("templates.agent.data", [{"source": "keys", "path": "/opt/keys"}]),
    ("hosts.local.labels", {"owner": AWS_KEY_ID}),
    ("policy.suppressions", [{"rule": "SBX-PORT-001", "target": "template/agent", "reason": f"see {AWS_SECRET}"}]),
)
FILES = {"keys/id_rsa": PEM + "\n"}
TLS = {"ca": PEM, "cert": {"secret": "dockerCert"}, "key": {"secret": "dockerKey"}}
# Invalid specs: a plain value where a secret reference belongs, URL userinfo, a flagged value in an error.
INVALID = {
    "runtime token": [("hosts.local.runtime", {"token": GITHUB})],
    "host tls": [("hosts.local", host("tcp://docker.example.com:2376", tls=TLS))],
    "ingress cert": [("hosts.local.ingress", {"domain": "sb.example.com",
                                              "tls": {"cert": PEM, "key": {"secret": "ingressKey"}}})],
    "secret file key": [("templates.agent.secrets", [{"secret": PEM, "path": "/run/secrets/session"}])],
    "env secret key": [("templates.agent.env.HOOK", {"secret": SLACK})],
    "image userinfo": [("templates.agent.base_image", f"deploy:{PASSWORD}@{REGISTRY}")],
    "push_to userinfo": [("templates.agent.snapshot.push_to", f"deploy:{PASSWORD}@{REGISTRY}")],
    "allow userinfo": [("templates.agent.network.allow", [f"https://deploy:{PASSWORD}@api.example.com"])],
    "allow bare userinfo": [("templates.agent.network.allow", [f"deploy:{PASSWORD}@api.example.com"])],
    "endpoint userinfo": [("hosts.local", host(f"ssh://deploy:{PASSWORD}@docker.example.com"))],
    "user is a token": [("templates.agent.user", GITHUB)],
    "memory is a token": [("templates.agent.limits.memory", JWT)],
    "long description": [("templates.agent.description", AWS_KEY_ID + " " * 500)],
}


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def _commands(path: Path, clean: Path) -> list[tuple[str, list[str]]]:
    out = []
    for command, formats in FORMATS.items():
        for fmt in formats:
            files = {"diff": [str(clean), str(path)]}.get(command, [str(path)])
            out.append((f"{command} --format {fmt}", [command, *files, "--format", fmt]))
            if command == "diff":
                out.append((f"diff --format {fmt} (removed)", [command, str(path), str(clean), "--format", fmt]))
    return out


def test_the_planted_pieces_are_what_a_leak_would_show():
    # The detector of leaks itself: it sees each secret whole and each recognisable piece of it.
    for secret in (GITHUB, AWS_KEY_ID, AWS_SECRET, PEM, SLACK, JWT, BASE64_TOKEN, f"user:{PASSWORD}@host"):
        assert leaked(f"x {secret} y") != []
    assert leaked("x " + next(iter(pieces(AWS_SECRET))) + " y") == ["aws-secret"]
    assert leaked("sandstack check found 3 errors") == []


def test_a_valid_spec_with_credentials_everywhere_prints_none_of_them(tmp_path, capsys):
    path = write_spec(tmp_path / "leaky", LEAKY, FILES)
    clean = write_spec(tmp_path / "clean", CLEAN)
    codes = {}
    for name, argv in _commands(path, clean):
        code, output = _run(capsys, *argv)
        codes[name] = code
        assert leaked(output) == [], f"{name} printed a credential"
        if name.startswith(("preview --format text", "diff --format text")):
            assert PLACEHOLDER in output  # shown as redacted, not left out by chance
    assert {n: c for n, c in codes.items() if c} == {f"check --format {f}": 1 for f in FORMATS["check"]}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_an_invalid_spec_never_echoes_a_secret_in_any_command_or_format(case, tmp_path, capsys):
    path = write_spec(tmp_path / "bad", changed(*INVALID[case]))
    clean = write_spec(tmp_path / "clean", CLEAN)
    for name, argv in _commands(path, clean):
        code, output = _run(capsys, *argv)
        assert code == 1, f"{name}: {output}"
        assert leaked(output) == [], f"{name} printed a credential: {output}"


@pytest.mark.parametrize(("case", "message"), [
    ("runtime token", "$.hosts.local.runtime.token: expected {secret: KEY}, got a plain string (value not shown)"),
    ("host tls", "$.hosts.local.tls.ca: expected {secret: KEY}, got a plain string (value not shown)"),
    ("ingress cert", "$.hosts.local.ingress.tls.cert: expected {secret: KEY}, got a plain string (value not shown)"),
    ("secret file key", "$.templates.agent.secrets[0].secret: expected a config key (a Pulumi config key such as "
                        "'apiToken' or 'myproject:apiToken'), got a plain string that is not one (value not shown)"),
    ("endpoint userinfo", "$.hosts.local.endpoint: 'ssh://***@docker.example.com' is not a valid Docker endpoint: use "
                          "'unix:///var/run/docker.sock', 'ssh://user@host[:port]' or 'tcp://host:port' (with tls)"),
    ("image userinfo", f"$.templates.agent.base_image: '***@{REGISTRY}' is not a valid image reference: use an image "
                       "reference such as 'python:3.12-slim' or 'repo/name@sha256:<64 hex digits>'"),
    ("allow userinfo", "$.templates.agent.network.allow[0]: an entry must not carry credentials (userinfo before '@', "
                       "value not shown): write just the host, optionally with ':port'"),
])
def test_the_message_says_what_is_wrong_where_without_the_value(case, message, tmp_path, capsys):
    path = write_spec(tmp_path, changed(*INVALID[case]))
    code, output = _run(capsys, "validate", str(path))
    assert code == 1
    located = [line for line in output.splitlines() if line.startswith(f"{path}:")]
    assert len(located) == 1 and located[0].split(": ", 1)[1] == message


def test_a_short_value_flagged_by_its_name_is_redacted_where_it_is_the_value_only(tmp_path, capsys):
    # `DB_PASSWORD: agent` is flagged by detect-secrets' keyword plugin; the template is named 'agent' too.
    path = write_spec(tmp_path, changed(("templates.agent.env.DB_PASSWORD", "agent")))
    code, output = _run(capsys, "preview", str(path))
    assert code == 0 and f"DB_PASSWORD={PLACEHOLDER}" in output and "DB_PASSWORD=agent" not in output
    assert "pool sandstack-agent.local" in output and "sandbox sandstack-agent.local-0" in output


def _tail(kind: str) -> str:
    """A tail each prefix's rule takes for a token's (built from pieces, as planted.py builds its credentials)."""
    tails = {ANY: "0123456789" + "abcdef0123", MIXED: "Zq8Lp2Wx7R" + "n4Kd1Vb6Hs9Tm3", UPPER: "Q3EGRUVW" + "5XYZ6ABC"}
    return tails[kind]


def test_a_chat_bot_token_in_a_host_label_is_flagged_and_neither_value_is_printed_by_any_format(tmp_path, capsys):
    # The issue: `xoxb-` and 24 hex characters in `hosts.*.labels` passed check, and diff printed the old and the
    # rotated token on every "because" line (15 of them), preview --format json printed it whole.
    base = write_spec(tmp_path / "base", changed(("hosts.local.labels", {"team": SLACK_BOT})), lock=True)
    head = write_spec(tmp_path / "head", changed(("hosts.local.labels", {"team": SLACK_BOT_ROTATED})))
    code, output = _run(capsys, "check", str(base), "--format", "json")
    assert code == 1 and [(f["rule"], f["message"]) for f in json.loads(output)["findings"]] == [
        ("SBX-SEC-003", "Host 'local' must not hold a credential in labels.team (value not shown).")]
    for fmt in FORMATS["diff"]:
        code, output = _run(capsys, "diff", str(base), str(head), "--format", fmt)
        assert code == 0 and leaked(output) == [], fmt
        assert "because hosts.local.labels.team" not in output or PLACEHOLDER in output
    code, output = _run(capsys, "diff", str(base), str(head))
    because = [line for line in output.splitlines() if "because hosts.local.labels.team" in line]
    assert len(because) > 10 and all(f"team: {PLACEHOLDER} → {PLACEHOLDER}" in line for line in because)
    for fmt in FORMATS["preview"]:
        code, output = _run(capsys, "preview", str(base), "--format", fmt)
        assert code == 0 and leaked(output) == [], fmt
        assert fmt != "json" or PLACEHOLDER in output  # the tree and markdown leave labels out; json shows them


@pytest.mark.parametrize(("prefix", "what", "kind"), CREDENTIAL_PREFIXES, ids=[p for p, _, _ in CREDENTIAL_PREFIXES])
def test_each_known_credential_prefix_makes_a_credential_wherever_a_user_writes_it(prefix, what, kind, tmp_path,
                                                                                   capsys):
    token = prefix + _tail(kind)
    data = changed(("hosts.local.labels", {"team": token}), ("templates.agent.env.NOTES", f"see {token}"),
                   ("templates.agent.snapshot.setup", [f"echo {token} > /etc/x"]))
    path = write_spec(tmp_path, data, lock=True)
    code, output = _run(capsys, "check", str(path), "--format", "json")
    assert code == 1 and sorted((f["rule"], f["path"]) for f in json.loads(output)["findings"]) == [
        ("SBX-SEC-001", "$.templates.agent.env.NOTES"), ("SBX-SEC-003", "$.hosts.local.labels.team"),
        ("SBX-SEC-003", "$.templates.agent.snapshot.setup[0]")], what
    for fmt in FORMATS["preview"]:
        code, output = _run(capsys, "preview", str(path), "--format", fmt)
        assert code == 0 and token[len(prefix):] not in output, (what, fmt)


@pytest.mark.parametrize("text", ["pip install sk-learn hf_transfer", "from huggingface_hub import hf_hub_download",
                                  "ASIA_PACIFIC_REGION", "npm_config_cache", "task-0123456789abcdef",
                                  "Slack bot tokens start with xoxb-", "sk-abc-def-ghi-jkl-mno", "/opt/hf_cache_2024"])
def test_a_word_that_only_looks_like_a_prefix_is_not_a_credential(text):
    assert not looks_like_credential(text, "NOTES")


# A GitHub token split across two variables (issue 34): no scanner took either half for a credential.
HALVES = (GITHUB[:20], GITHUB[20:])
SPLIT = [("templates.agent.env.GH_TOKEN_A", HALVES[0]), ("templates.agent.env.GH_TOKEN_B", HALVES[1])]


def test_a_credential_split_across_two_secret_named_variables_is_reported_and_never_printed(tmp_path, capsys):
    path = write_spec(tmp_path / "split", changed(*SPLIT), lock=True)
    clean = write_spec(tmp_path / "clean", CLEAN)
    code, output = _run(capsys, "check", str(path), "--format", "json")
    # The first half by its prefix, the second by its name alone.
    assert code == 1 and [(f["rule"], f["path"], f["message"]) for f in json.loads(output)["findings"]] == [
        ("SBX-SEC-001", "$.templates.agent.env.GH_TOKEN_A",
         "Template 'agent' must not hold a credential in plain env GH_TOKEN_A (value not shown)."),
        ("SBX-SEC-005", "$.templates.agent.env.GH_TOKEN_B",
         "Template 'agent' must give env GH_TOKEN_B as a secret reference: its name says it holds one (value not "
         "shown).")]
    for name, argv in _commands(path, clean):
        code, output = _run(capsys, *argv)
        assert HALVES[0] not in output and HALVES[1] not in output, name
    code, output = _run(capsys, "preview", str(path))
    assert f"GH_TOKEN_A={PLACEHOLDER}" in output and f"GH_TOKEN_B={PLACEHOLDER}" in output


@pytest.mark.parametrize(("value", "message"), [
    (1234567, "expected a string or {secret: KEY}, got a number (value not shown)"),
    (["ghp_", "A1b2"], "expected a string or {secret: KEY}, got a list (value not shown)"),
    ("x" * 40000, "has 40000 characters; at most 32768 allowed (value not shown)"),
])
def test_validate_never_shows_the_value_of_a_secret_named_variable(value, message, tmp_path, capsys):
    for where in ("templates.agent.env.DB_PASSWORD", "defaults.env.API_KEY_1"):
        path = write_spec(tmp_path, changed((where, value)))
        code, output = _run(capsys, "validate", str(path))
        assert code == 1 and f"$.{where}: {message}" in output and "1234567" not in output and "A1b2" not in output


@pytest.mark.parametrize(("name", "secret"), [
    ("GITHUB_TOKEN", True), ("TOKEN_A", True), ("API_KEY_2", True), ("KEY_PART1", True), ("DB_PASSWORD", True),
    ("PGPASSWORD", True), ("CLIENT_SECRET", True), ("AWS_SECRET_ACCESS_KEY", True), ("openaiApiKey", True),
    ("GH_PAT", True), ("BASIC_AUTH", True),
    ("POSTGRES_PASSWORD_FILE", False), ("AWS_ACCESS_KEY_ID", False), ("MAX_TOKENS", False), ("TOKEN_LIMIT", False),
    ("TOKENIZERS_PARALLELISM", False), ("PUBLIC_KEY", False), ("SECRETS_DIR", False), ("LOG_LEVEL", False),
    ("PASSPORT_NUMBER", False),
])
def test_which_names_say_secret(name, secret):
    assert secret_named(name) is secret
