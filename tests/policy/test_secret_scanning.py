"""Secret scanning covers every string a user writes into a spec and every file it ships (SBX-SEC-001 … 004):
each planted credential is found where it was planted, with its rule ID, at its file:line:col, never echoed, and
`check` exits 1. The scan runs detect-secrets once over all strings (not per value): a spec with thousands of env
entries costs one batch."""

from __future__ import annotations

import random
import string
from pathlib import Path

import pytest

from sandstack.policy.runner import check
from sandstack.spec import credentials
from sandstack.tooling.cli import main
from tests.policy.cases import changed
from tests.policy.planted import AWS_KEY_ID, SECRETS, leaked
from tests.policy.test_builtin_rules import value_position
from testbed.specs import write_spec

T = "Template 'agent'"


def _one_line(secret: str) -> str:
    return secret.split("\n")[0] if "\n" in secret else secret


# (place, the change that plants `s`, JSON path of the finding, rule, message)
PLACES = [
    ("setup step", lambda s: [("templates.agent.snapshot.setup", ["pip install requests", f"echo '{s}' > /etc/t"])],
     "$.templates.agent.snapshot.setup[1]", "SBX-SEC-003",
     f"{T} must not hold a credential in snapshot.setup[1] (value not shown)."),
    ("command", lambda s: [("templates.agent.command", ["sh", "-c", f"agent --token '{_one_line(s)}'"])],
     "$.templates.agent.command[2]", "SBX-SEC-003", f"{T} must not hold a credential in command[2] (value not shown)."),
    ("readiness argv", lambda s: [("templates.agent.readiness", {"command": ["curl", "-H", f"X-Token: {_one_line(s)}",
                                                                              "http://127.0.0.1:8080/"]})],
     "$.templates.agent.readiness.command[2]", "SBX-SEC-003",
     f"{T} must not hold a credential in readiness.command[2] (value not shown)."),
    ("label", lambda s: [("hosts.local.labels", {"team": _one_line(s)})], "$.hosts.local.labels.team", "SBX-SEC-003",
     "Host 'local' must not hold a credential in labels.team (value not shown)."),
    ("description", lambda s: [("templates.agent.description", f"Agent; reaches the API with {s}")],
     "$.templates.agent.description", "SBX-SEC-003",
     f"{T} must not hold a credential in description (value not shown)."),
    ("suppression reason", lambda s: [("policy.suppressions", [{"rule": "SBX-PORT-001", "target": "template/agent",
                                                               "reason": f"reviewed, see {s}"}])],
     "$.policy.suppressions[0].reason", "SBX-SEC-003",
     "The stack must not hold a credential in policy.suppressions[0].reason (value not shown)."),
    ("env value", lambda s: [("templates.agent.env.NOTES", s)], "$.templates.agent.env.NOTES", "SBX-SEC-001",
     f"{T} must not hold a credential in plain env NOTES (value not shown)."),
]
FILES = [
    ("snapshot file", [("templates.agent.snapshot.files", [{"source": "files/tool.py", "path": "/opt/tool.py"}])],
     "files/tool.py", "$.templates.agent.snapshot.files[0].source", "files/tool.py line 2"),
    ("data mount", [("templates.agent.data", [{"source": "skills", "path": "/opt/skills"}])], "skills/conf/app.env",
     "$.templates.agent.data[0].source", "skills/conf/app.env line 2"),
]


def _report(tmp_path: Path, data: dict, files: dict[str, str] | None = None):
    path = write_spec(tmp_path, data, files, lock=True)  # locked, as a committed stack (SBX-ADDR-001 apart)
    report = check([str(path)], [])
    assert report.invalid == [] and report.unreadable == []
    return path, report


@pytest.mark.parametrize("kind", sorted(SECRETS))
@pytest.mark.parametrize(("place", "plant", "where", "rule", "message"), PLACES, ids=[p[0] for p in PLACES])
def test_a_credential_anywhere_in_the_spec_is_found_located_and_not_shown(place, plant, where, rule, message, kind,
                                                                          tmp_path):
    path, report = _report(tmp_path, changed(*plant(SECRETS[kind])))
    mine = [f for f in report.findings if f.rule.startswith("SBX-SEC")]
    assert [(f.rule, f.path, f.message) for f in mine] == [(rule, where, message)]
    assert (mine[0].line, mine[0].column) == value_position(path.read_text(), where)
    assert report.exit_code() == 1 or place == "suppression reason"  # that one suppresses nothing: see below


@pytest.mark.parametrize("kind", sorted(SECRETS))
@pytest.mark.parametrize(("place", "change", "file", "where", "line"), FILES, ids=[f[0] for f in FILES])
def test_a_credential_in_a_shipped_file_is_found_at_its_line(place, change, file, where, line, kind, tmp_path):
    content = f"# settings\nTOKEN = '{_one_line(SECRETS[kind])}'\n" if kind != "pem" else f"# key\n{SECRETS[kind]}\n"
    line = line if kind != "pem" else line.replace("line 2", "lines 2, 3")
    path, report = _report(tmp_path, changed(*change), {file: content})
    assert [(f.rule, f.path, f.message) for f in report.findings] == [
        ("SBX-SEC-004", where, f"{T} must not ship a credential into its sandboxes: {line} (value not shown).")]
    assert (report.findings[0].line, report.findings[0].column) == value_position(path.read_text(), where)
    assert report.exit_code() == 1


def test_a_credential_in_a_suppression_reason_fails_the_check_and_the_reason_is_not_printed(tmp_path, capsys):
    data = changed(("templates.agent.ports", [{"port": 9000, "exposure": "public"}]),
                   ("policy.suppressions", [{"rule": "SBX-PORT-001", "target": "template/agent",
                                             "reason": f"reviewed with token {SECRETS['github']}"}]))
    path = write_spec(tmp_path, data)
    for fmt in ("text", "json", "github", "sarif"):
        assert main(["check", str(path), "--format", fmt]) == 1
        out = capsys.readouterr()
        assert "SBX-SEC-003" in out.out + out.err and leaked(out.out + out.err) == []


def test_an_aws_key_pair_split_over_two_env_entries_is_found_by_its_pair_context(tmp_path):
    # A secret half whose entropy alone does not flag it: beside an access key id, detect-secrets' AWS plugin
    # sees it as `aws_secret_access_key = "…"`.
    half = "abcdabcdabcdabcd" + "ABCDABCDABCD1234" + "1234/+/+"
    assert not credentials.looks_like_credential(half, "S3_B")
    _, alone = _report(tmp_path / "alone", changed(("templates.agent.env.S3_B", half)))
    assert alone.findings == []
    _, pair = _report(tmp_path / "pair", changed(("templates.agent.env.S3_A", AWS_KEY_ID),
                                                 ("templates.agent.env.S3_B", half)))
    assert [(f.rule, f.path, f.message) for f in pair.findings] == [
        ("SBX-SEC-001", "$.templates.agent.env.S3_A", f"{T} must not hold a credential in plain env S3_A (value not "
                                                      "shown)."),
        ("SBX-SEC-001", "$.templates.agent.env.S3_B", f"{T} must not hold the secret half of an AWS key pair in "
                                                      "env.S3_B (value not shown): an access key id sits beside it.")]


def test_the_scan_is_one_batch_not_one_detect_secrets_pass_per_value(tmp_path, monkeypatch):
    # 3,000 env entries and one token: detect-secrets' plugins analyse only the lines their patterns can match,
    # not each of the ~6,000 strings (per value, a 40,000-entry spec took seconds).
    calls = []
    analyse = credentials.detected_types
    monkeypatch.setattr(credentials, "detected_types",
                        lambda text, name="VALUE": calls.append(text) or analyse(text, name))
    env = {f"VAR_{i:05d}": f"value-{i}" for i in range(3000)} | {"NOTES": SECRETS["github"]}
    _, report = _report(tmp_path, changed(("templates.agent.env", env)))
    assert [f.path for f in report.findings] == ["$.templates.agent.env.NOTES"]
    assert SECRETS["github"] in calls and len(calls) < 20


def test_the_batch_finds_exactly_what_each_plugin_finds_line_by_line():
    # The batch only picks which lines to analyse: its verdicts equal detect-secrets' plugins run on every line of
    # every string (seeded random strings, and each planted kind alone, quoted, in a word list, after a key).
    rng = random.Random(18)
    items = [(kind.upper().replace("-", "_"), text) for kind, secret in SECRETS.items()
             for text in (secret, f"x '{secret}'", f"token={secret}", f"pre {secret} tail")]
    items += [("X", "AKC" + "abcdefghijk1"), ("Y", "x:AP2" + "abcdefghz"), ("PASSWORD", "hunter2")]
    items += [("".join(rng.choice(string.ascii_letters + "_") for _ in range(rng.randint(1, 12))),
               "".join(rng.choice(string.printable[:95]) for _ in range(rng.randint(0, 60)))) for _ in range(1500)]
    batch = credentials.scan(items)
    one_by_one = [set().union(*(credentials.detected_types(part, name) for part in credentials._parts(text)))
                  for name, text in items]
    assert batch == one_by_one and sum(map(bool, batch)) >= len(SECRETS) * 4
