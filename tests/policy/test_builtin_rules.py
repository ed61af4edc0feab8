"""Each built-in rule: the clean stack passes it, and one changed field fails it with the exact message at the
field's place in the file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from sandstack.policy.builtin import RULES
from sandstack.policy.runner import check
from tests.policy.cases import CLEAN, changed
from testbed.specs import write_spec

T = "Template 'agent'"
CASES = [
    ("SBX-PRIV-001", [("templates.agent.security", {"privileged": True})], f"{T} must not run privileged.",
     "$.templates.agent.security.privileged"),
    ("SBX-PRIV-002", [("templates.agent.security", {"capabilities": ["NET_ADMIN"]}), ("templates.agent.user", "0:0")],
     f"{T} must not add capabilities outside the allowed set: NET_ADMIN.", "$.templates.agent.security.capabilities"),
    ("SBX-PRIV-003", [("templates.agent.user", "0:0")], f"{T} must not run as root (user 0:0).",
     "$.templates.agent.user"),
    ("SBX-PRIV-004", [("templates.agent.security", {"no_new_privileges": False})],
     f"{T} must keep no_new_privileges on.", "$.templates.agent.security.no_new_privileges"),
    ("SBX-PRIV-005", [("templates.agent.filesystem", {"read_only_root": False}),
                      ("hosts.local.storage_quota", True)],
     f"{T} must keep a read-only root filesystem.", "$.templates.agent.filesystem.read_only_root"),
    ("SBX-PRIV-006", [("templates.agent.runtime", "runc")], f"{T} must use the runsc runtime for untrusted code, "
     "not runc.", "$.templates.agent.runtime"),
    ("SBX-PRIV-007", [("templates.agent.security", {"sudo": True})], f"{T} must not let its user sudo.",
     "$.templates.agent.security.sudo"),
    ("SBX-LIM-001", [("templates.agent.limits.cpus", 32)], f"{T} must have at most 16 CPUs, not 32.",
     "$.templates.agent.limits.cpus"),
    ("SBX-LIM-001", [("templates.agent.limits.memory", "96GiB")], f"{T} must have at most 64GiB of memory, not 96GiB.",
     "$.templates.agent.limits.memory"),
    ("SBX-LIM-001", [("templates.agent.limits.memory", "1536MiB"), ("policy.ceilings", {"memory": "1GiB"})],
     f"{T} must have at most 1GiB of memory, not 1536MiB.", "$.templates.agent.limits.memory"),
    ("SBX-LIM-001", [("templates.agent.limits.pids", 5000)], f"{T} must have at most 4096 processes, not 5000.",
     "$.templates.agent.limits.pids"),
    ("SBX-LIM-002", [("templates.agent.lifecycle.max_lifetime", "30h")],
     f"{T} must have a max lifetime of at most 1d, not 30h.", "$.templates.agent.lifecycle.max_lifetime"),
    ("SBX-LIM-002", [("templates.agent.lifecycle.max_lifetime", "90m"), ("policy.ceilings", {"max_lifetime": "1h"})],
     f"{T} must have a max lifetime of at most 1h, not 90m.", "$.templates.agent.lifecycle.max_lifetime"),
    ("SBX-NET-001", [("templates.agent.network", {"egress": "allow-all"})],
     f"{T} must not use allow-all egress in a production stack.", "$.templates.agent.network.egress"),
    ("SBX-NET-002", [("templates.agent.network", {"egress": "allow-all", "log": False}),
                     ("policy.production", False)],
     f"{T} must log its egress (network.log is false).", "$.templates.agent.network.log"),
    ("SBX-NET-003", [("templates.agent.network.allow", ["api.github.com", "10.1.0.0/16:443"])],
     f"{T} must not allow the private or link-local destination 10.1.0.0/16:443.",
     "$.templates.agent.network.allow[1]"),
    # "This network" (0.0.0.0/8) is one of the PRIVATE_RANGES the gateway and the guard refuse; and in allow-all,
    # where an allow entry is an exception to that refusal.
    ("SBX-NET-003", [("templates.agent.network", {"egress": "allow-all", "allow": ["0.1.2.3"]}),
                     ("policy.production", False)],
     f"{T} must not allow the private or link-local destination 0.1.2.3/32.", "$.templates.agent.network.allow[0]"),
    ("SBX-NET-004", [("templates.agent.network.allow_metadata", True)],
     f"{T} opts in to the cloud metadata address.", "$.templates.agent.network.allow_metadata"),
    ("SBX-PORT-001", [("templates.agent.ports", [{"port": 9000, "exposure": "public"}])],
     f"{T} must not expose port(s) 9000 publicly (allowed: 8080).", "$.templates.agent.ports"),
    ("SBX-IMG-001", [("templates.agent.base_image", "python:3.12-slim")],
     f"{T} must pin its base image by digest in a production stack.", "$.templates.agent.base_image"),
    ("SBX-IMG-002", [("templates.agent.base_image", "registry.example.com/python:3.12" + "@sha256:" + "ab" * 32)],
     f"{T} must use a base image from an allowed registry (docker.io/library).", "$.templates.agent.base_image"),
    ("SBX-SEC-001", [("templates.agent.env.MODE", "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8")],
     f"{T} must not hold a credential in plain env MODE (value not shown).", "$.templates.agent.env.MODE"),
    ("SBX-SEC-002", [("templates.agent.env.GITHUB_TOKEN", {"secret": "AKIAIOSFODNN7EXAMPLE"})],
     f"{T} must name a config key in env.GITHUB_TOKEN.secret, not a value that looks like a credential (not shown).",
     "$.templates.agent.env.GITHUB_TOKEN.secret"),
    ("SBX-SEC-003", [("templates.agent.command", ["sh", "-c", "curl -H 'Authorization: token " + "ghp_"
                                                  + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8' https://api.github.com"])],
     f"{T} must not hold a credential in command[2] (value not shown).", "$.templates.agent.command[2]"),
    ("SBX-SEC-005", [("templates.agent.env.TOKEN_A", "ghp_" + "A1b2")],
     f"{T} must give env TOKEN_A as a secret reference: its name says it holds one (value not shown).",
     "$.templates.agent.env.TOKEN_A"),
    ("SBX-GPU-001", [("templates.agent.security", {"privileged": True}),
                     ("templates.agent.limits.gpus", {"count": 1}),
                     ("hosts.local.capacity.gpus", [{"type": "nvidia-l4", "count": 2}])],
     f"{T} must not combine GPUs with privileged.", "$.templates.agent.limits.gpus"),
    ("SBX-GPU-002", [("templates.agent.limits.gpus", {"count": 4}), ("policy.ceilings", {"gpus": 2}),
                     ("hosts.local.capacity.gpus", [{"type": "nvidia-l4", "count": 8}])],
     f"{T} must request at most 2 GPUs, not 4.", "$.templates.agent.limits.gpus"),
]


def _findings(tmp_path: Path, data: dict):
    path = write_spec(tmp_path, data, lock=True)  # locked, as a committed stack (SBX-ADDR-001 is tested apart)
    report = check([str(path)], [])
    assert report.invalid == [] and report.unreadable == []
    return path, report.active()


def test_the_clean_stack_passes_every_rule(tmp_path):
    assert _findings(tmp_path, CLEAN)[1] == []


def test_every_built_in_rule_has_a_case_and_a_complete_entry():
    # SBX-SNAP-001 needs --base, SBX-POL-001 a suppression and SBX-ADDR-001 a stack without its lock: all are tested
    # in test_check; SBX-SEC-004 a shipped file: tested in test_secret_scanning.
    assert sorted({c[0] for c in CASES} | {"SBX-SNAP-001", "SBX-POL-001", "SBX-ADDR-001", "SBX-SEC-004"}) == \
        sorted(RULES)
    for rule in RULES.values():
        assert rule.name.islower() and " " not in rule.name and rule.description.startswith("Checks whether ")
        assert rule.severity in ("error", "warning") and rule.remediation


@pytest.mark.parametrize(("rule", "changes", "message", "where"), CASES, ids=[c[0] for c in CASES])
def test_one_changed_field_fails_the_rule_with_its_message_at_the_field(rule, changes, message, where, tmp_path):
    path, findings = _findings(tmp_path, changed(*changes))
    mine = [f for f in findings if f.rule == rule]
    assert [(f.message, f.path, f.severity) for f in mine] == [(message, where, RULES[rule].severity)]
    assert (mine[0].line, mine[0].column) == value_position(path.read_text(), where)
    assert mine[0].target == "template/agent" and mine[0].remediation == RULES[rule].remediation


def value_position(text: str, where: str) -> tuple[int, int]:
    """Where the value at a JSON path starts, by PyYAML's own node marks (not the loader under test)."""
    node = yaml.compose(text)
    for key, index in re.findall(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]", where.removeprefix("$")):
        if index:
            node = node.value[int(index)]
        else:
            node = next(v for k, v in node.value if k.value == key)
    return node.start_mark.line + 1, node.start_mark.column + 1


def test_a_size_class_over_the_ceilings_fails_limits_at_the_class(tmp_path):
    """A claim of a class runs with its limits: SBX-LIM-001 holds each class to the ceilings as it holds the template."""
    data = changed(("hosts.local.runtime", {"token": {"secret": "runtimeToken"}}),
                   ("policy.ceilings", {"cpus": 8, "pids": 1024}),
                   ("pools.agent.sizes", {"large": {"cpus": 4, "pids": 1024}, "huge": {"cpus": 12, "pids": 2048}}))
    path, findings = _findings(tmp_path, data)
    mine = [(f.target, f.message, f.path) for f in findings if f.rule == "SBX-LIM-001"]
    assert mine == [
        ("pool/agent", "Size class 'huge' of pool 'agent' must have at most 8 CPUs, not 12.",
         "$.pools.agent.sizes.huge.cpus"),
        ("pool/agent", "Size class 'huge' of pool 'agent' must have at most 1024 processes, not 2048.",
         "$.pools.agent.sizes.huge.pids")]
