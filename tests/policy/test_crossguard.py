"""The CrossGuard pack's validators, called directly with container inputs captured from a mocked run of the
real program (the pack's entry point blocks waiting for the engine, so it is only checked for its rule list)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import yaml
from pulumi_policy import ResourceValidationArgs
from pulumi_policy.policy import PolicyCustomTimeouts, PolicyResourceOptions

from sandstack.policy.crossguard import CONTAINER, CONTAINER_RULES, validator
from tests.components.helpers import Built
from tests.policy.cases import changed
from testbed.specs import REPO

PACK = REPO / "policies" / "crossguard"


def _args(props: dict, name: str, config: dict | None) -> ResourceValidationArgs:
    """What the policy analyzer hands a validator (pulumi_policy's own class): the pack's config comes through
    get_config(), as `pulumi preview --policy-pack-config` delivers it."""
    opts = PolicyResourceOptions(protect=False, ignore_changes=[], delete_before_replace=None, aliases=[],
                                 custom_timeouts=PolicyCustomTimeouts(0, 0, 0), additional_secret_outputs=[])
    return ResourceValidationArgs(CONTAINER, props, f"urn:pulumi:t::p::{CONTAINER}::{name}", name, opts, None,
                                  config)


def _violations(props: dict, name: str = "c", config: dict | None = None) -> list[str]:
    found: list[str] = []
    for rule in CONTAINER_RULES:
        validator(rule)(_args(props, name, config), lambda message, urn: found.append(message))
    return found


def _inputs(tmp_path: Path, data: dict) -> dict[str, dict[str, Any]]:
    built = Built.from_spec(tmp_path / "spec", data, secret_config={"githubToken": "t"})
    return {r.name: r.inputs for r in built.mocks.registrations.values() if r.typ == CONTAINER}


def test_sandstack_s_own_sandboxes_pass_and_its_host_containers_are_skipped(tmp_path):
    data = changed(("hosts.local.ingress", {"domain": "sb.example.com"}),
                   ("hosts.local.runtime", {"token": {"secret": "runtimeToken"}}))
    built = Built.from_spec(tmp_path / "spec", data, secret_config={"githubToken": "t", "runtimeToken": "r" * 20})
    containers = {r.name: r.inputs for r in built.mocks.registrations.values() if r.typ == CONTAINER}
    config = {"publicPorts": [8080], "untrusted": True}
    assert {name: _violations(props, name, config) for name, props in containers.items()} == {
        name: [] for name in containers}
    # Root, host namespaces, NET_ADMIN, the Docker socket, a public 443: skipped by role.
    assert {"sandstack-local-guard-container", "sandstack-local-runtime-container", "sandstack-local-ingress-container",
            "sandstack-agent.local-0"} <= set(containers)


def test_a_privileged_root_sandbox_is_refused_with_the_same_rules_as_check(tmp_path):
    data = changed(("templates.agent.security", {"privileged": True}), ("templates.agent.user", "0:0"))
    props = _inputs(tmp_path, data)["sandstack-agent.local-0"]
    assert _violations(props, "sandstack-agent.local-0", {"publicPorts": [8080], "untrusted": True}) == [
        "Container 'sandstack-agent.local-0' must not run privileged. Remove `security.privileged`; add only the "
        "capabilities the workload needs.",
        "Container 'sandstack-agent.local-0' must not run as root (user 0:0). Set `user` to an unprivileged "
        "uid:gid such as '10001:10001'.",
    ]


def test_a_container_made_outside_sandstack_is_checked_too():
    props = {"image": "busybox", "privileged": False, "ports": [{"internal": 22, "ip": "0.0.0.0"}],
             "capabilities": {"adds": ["SYS_ADMIN"]}}
    assert _violations(props, "rogue") == [
        "Container 'rogue' must not add capabilities outside the allowed set: SYS_ADMIN. Drop the capability, or add "
        "it to `policy.capabilities` after review.",
        "Container 'rogue' must not run as root (user unset). Set `user` to an unprivileged uid:gid such as "
        "'10001:10001'.",
        "Container 'rogue' must keep no_new_privileges on. Remove `security.no_new_privileges: false`.",
        "Container 'rogue' must keep a read-only root filesystem. Keep the root read-only and declare writable paths "
        "instead.",
        "Container 'rogue' must not expose port(s) 22 publicly (allowed: none). Use `exposure: host`, or add the "
        "port to `policy.public_ports` after review.",
    ]


def test_the_pack_declares_each_container_rule_and_is_a_python_pack():
    assert yaml.safe_load((PACK / "PulumiPolicy.yaml").read_text())["runtime"] == "python"
    tree = ast.parse((PACK / "__main__.py").read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert {"PolicyPack", "ResourceValidationPolicy", "CONTAINER_RULES", "validator"} <= names
    assert "pulumi-policy" in (PACK / "requirements.txt").read_text()


def test_the_pack_config_is_honoured():
    # A public port 8080, capability NET_RAW and a writable root: refused by default, allowed by the config the
    # engine passes each policy (`--policy-pack-config`), read through ResourceValidationArgs.get_config().
    props = {"image": "busybox", "user": "10001:10001", "securityOpts": ["no-new-privileges:true"],
             "readOnly": False, "capabilities": {"adds": ["NET_RAW"]}, "ports": [{"internal": 8080, "ip": "0.0.0.0"}]}
    assert len(_violations(props, "app")) == 3
    assert _violations(props, "app", {"publicPorts": [8080], "capabilities": ["NET_RAW"], "writableRoot": True}) == []
    assert _violations(props, "app", {"publicPorts": [8080], "capabilities": ["NET_RAW"]}) == [
        "Container 'app' must keep a read-only root filesystem. Keep the root read-only and declare writable paths "
        "instead."]
