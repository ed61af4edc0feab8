"""The CrossGuard pack's validators, called directly with container inputs captured from a mocked run of the
real program (the pack's entry point blocks waiting for the engine, so it is only checked for its rule list).

A resource's URN is given as the engine writes it, with every parent's type (`_engine_urn`): Pulumi's mock monitor
keeps only the nearest parent's type (pulumi/runtime/mocks.py make_urn), the engine and the SDK's own create_urn
(pulumi/runtime/resource.py) the whole chain."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi_policy import ResourceValidationArgs
from pulumi_policy.policy import PolicyCustomTimeouts, PolicyResourceOptions

from sandstack.plan.ingress import IngressPlan, Site
from sandstack.policy.crossguard import CONTAINER, CONTAINER_RULES, served_url_ports, validator
from sandstack.policy.runner import check
from sandstack.spec.models.hosts import Ingress
from tests.components.helpers import Built
from tests.policy.cases import changed
from testbed.provider.mocks import Registration
from testbed.specs import REPO, write_spec

PACK = REPO / "policies" / "crossguard"


def _args(props: dict, name: str, config: dict | None, urn: str | None = None) -> ResourceValidationArgs:
    """What the policy analyzer hands a validator (pulumi_policy's own class): the pack's config comes through
    get_config(), as `pulumi preview --policy-pack-config` delivers it."""
    opts = PolicyResourceOptions(protect=False, ignore_changes=[], delete_before_replace=None, aliases=[],
                                 custom_timeouts=PolicyCustomTimeouts(0, 0, 0), additional_secret_outputs=[])
    return ResourceValidationArgs(CONTAINER, props, urn or f"urn:pulumi:t::p::{CONTAINER}::{name}", name, opts, None,
                                  config)


def _violations(props: dict, name: str = "c", config: dict | None = None, urn: str | None = None) -> list[str]:
    found: list[str] = []
    for rule in CONTAINER_RULES:
        validator(rule)(_args(props, name, config, urn), lambda message, urn: found.append(message))
    return found


def _engine_urn(reg: Registration, by_urn: dict[str, Registration]) -> str:
    """The URN the engine gives a registration: `urn:pulumi:STACK::PROJECT::<each parent's type>$<type>::NAME`
    (the root stack's type left out), rebuilt from the parents the mocks recorded."""
    chain = [reg.typ]
    parent = reg.request.parent if reg.request else ""
    while parent in by_urn:
        chain.insert(0, by_urn[parent].typ)
        parent = by_urn[parent].request.parent if by_urn[parent].request else ""
    stack, project = reg.urn.split("::")[0].removeprefix("urn:pulumi:"), reg.urn.split("::")[1]
    return f"urn:pulumi:{stack}::{project}::{'$'.join(chain)}::{reg.name}"


def _containers(built: Built) -> dict[str, tuple[dict[str, Any], str]]:
    """Each container's inputs and engine URN, by logical name."""
    by_urn = {r.urn: r for r in built.mocks.registrations.values()}
    return {r.name: (r.inputs, _engine_urn(r, by_urn)) for r in by_urn.values() if r.typ == CONTAINER}


def _inputs(tmp_path: Path, data: dict) -> dict[str, dict[str, Any]]:
    built = Built.from_spec(tmp_path / "spec", data, secret_config={"githubToken": "t"})
    return {r.name: r.inputs for r in built.mocks.registrations.values() if r.typ == CONTAINER}


def test_sandstack_s_own_sandboxes_pass_and_its_host_containers_are_exempt_by_their_component(tmp_path):
    data = changed(("hosts.local.ingress", {"domain": "sb.example.com"}),
                   ("hosts.local.runtime", {"token": {"secret": "runtimeToken"}}),
                   ("templates.agent.secrets", [{"secret": "githubToken", "path": "/run/secrets/gh"}]),
                   ("templates.agent.data", [{"path": "/opt/ref", "source": "ref"}]))
    built = Built.from_spec(tmp_path / "spec", data, files={"ref/a.txt": "a\n"},
                            secret_config={"githubToken": "t", "runtimeToken": "r" * 20})
    containers = _containers(built)
    config = {"publicPorts": [8080], "untrusted": True}
    assert {name: _violations(props, name, config, urn) for name, (props, urn) in containers.items()} == {
        name: [] for name in containers}
    # Root, host namespaces, NET_ADMIN, the Docker socket, a public 443, root seeders: exempt as children of
    # sandstack's components, which the engine's URN names.
    assert containers["sandstack-local-guard-container"][1] == (
        "urn:pulumi:t::sandstack::sandstack:index:SandboxStack$sandstack:index:SandboxHost$sandstack:index:HostGuard"
        "$docker:index/container:Container::sandstack-local-guard-container")
    assert sorted(containers) == [
        "sandstack-agent.local-0", "sandstack-agent.local-data-seeder", "sandstack-agent.local-secrets-seeder",
        "sandstack-local-gateway-container", "sandstack-local-gateway-reload", "sandstack-local-guard-container",
        "sandstack-local-guard-reload", "sandstack-local-ingress-container", "sandstack-local-ingress-reload",
        "sandstack-local-logger-container", "sandstack-local-logger-reload", "sandstack-local-runtime-container",
        "sandstack-local-runtime-reload"]
    # The same guard container outside sandstack's tree is held to every rule.
    assert _violations(containers["sandstack-local-guard-container"][0], "g", config) == [
        "Container 'g' must not add capabilities outside the allowed set: DAC_OVERRIDE, KILL, MKNOD, NET_ADMIN, NET_RAW. "
        "Drop the capability, or add it to `policy.capabilities` after review.",
        "Container 'g' must not run as root (user unset). Set `user` to an unprivileged uid:gid such as '10001:10001'.",
        "Container 'g' must use the runsc runtime for untrusted code, not runc. Set `runtime: runsc` (gVisor must be "
        "installed on the hosts)."]


ROGUE = {"image": "busybox", "privileged": True, "user": "0:0", "ports": [{"internal": 22, "ip": "0.0.0.0"}]}
ROGUE_VIOLATIONS = [
    "Container 'rogue' must not run privileged. Remove `security.privileged`; add only the capabilities the "
    "workload needs.",
    "Container 'rogue' must not run as root (user 0:0). Set `user` to an unprivileged uid:gid such as "
    "'10001:10001'.",
    "Container 'rogue' must keep no_new_privileges on. Remove `security.no_new_privileges: false`.",
    "Container 'rogue' must keep a read-only root filesystem. Keep the root read-only and declare writable paths "
    "instead.",
    "Container 'rogue' must not expose port(s) 22 publicly (allowed: none). Use `exposure: host`, or add the port to "
    "`policy.public_ports` after review.",
]


@pytest.mark.parametrize("role", ["guard", "gateway", "secrets-seeder", "data-seeder", "logger", "runtime", "ingress",
                                  "sandbox"])
def test_a_container_labelled_as_a_sandstack_host_role_gets_the_violations_of_an_unlabelled_one(role):
    # The bypass: a user program labels its privileged root container with a public port as the guard.
    labelled = {**ROGUE, "labels": [{"label": "sandstack.role", "value": role},
                                    {"label": "sandstack.managed-by", "value": "pulumi"}]}
    assert _violations(ROGUE, "rogue") == ROGUE_VIOLATIONS
    assert _violations(labelled, "rogue") == ROGUE_VIOLATIONS


@pytest.mark.parametrize("chain", [
    # directly under a host, under a program's own component named like a role, under a host outside a stack,
    # a pool's child named like a sandbox, a program's component wrapping the chain's end only
    "sandstack:index:SandboxStack$sandstack:index:SandboxHost",
    "sandstack:index:SandboxStack$sandstack:index:SandboxHost$acme:index:HostGuard",
    "sandstack:index:SandboxHost$sandstack:index:HostGuard",
    "sandstack:index:SandboxStack$sandstack:index:SandboxHost$sandstack:index:SandboxPool",
    "acme:index:Stack$sandstack:index:HostGuard",
])
def test_only_sandstack_s_host_components_exempt_a_container(chain):
    urn = f"urn:pulumi:t::p::{chain}${CONTAINER}::rogue"
    assert _violations(ROGUE, "rogue", urn=urn) == ROGUE_VIOLATIONS
    # The real place, inside a program's own component: exempt.
    real = f"urn:pulumi:t::p::acme:index:Platform$sandstack:index:SandboxStack$sandstack:index:SandboxHost$" \
           f"sandstack:index:HostGuard${CONTAINER}::rogue"
    assert _violations(ROGUE, "rogue", urn=real) == []


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


def test_the_pack_s_requirements_install_sandstack_from_this_repository():
    # sandstack is not on a public index: the requirements name this repository by a path, which pip reads from
    # the pack's folder (as its comment and the README say to run it). pip's own resolver, offline and without
    # installing, must pick this checkout, not an installed or indexed `sandstack`.
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index",
                           "--no-build-isolation", "--quiet", "--report", "-", "-r", "requirements.txt"],
                          cwd=PACK, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    installs = {i["metadata"]["name"]: i["download_info"]["url"] for i in json.loads(done.stdout)["install"]}
    assert installs == {"sandstack": REPO.resolve().as_uri()}
    assert "cd policies/crossguard && python3 -m venv venv && venv/bin/pip install -r requirements.txt" in (
        PACK / "requirements.txt").read_text()


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


URL_FIX = ("Serve the host's URLs on its loopback only (`ingress.exposure: host`, behind your own proxy or tunnel), or "
           "add the port to `policy.public_ports` after review.")


@pytest.mark.parametrize(("exposure", "pack", "check_messages"), [
    ("public", ["Container 'sandstack-t-agent-0' must not serve port(s) 3000 publicly at its URL (allowed: 8080). "
                + URL_FIX],
     [("Template 'agent' must not serve port(s) 3000 publicly at its URL (allowed: 8080).", URL_FIX)]),
    ("host", [], []),
])
def test_check_and_the_pack_agree_a_url_port_is_public_when_its_ingress_is(exposure, pack, check_messages, tmp_path):
    # `exposure: url` on a public ingress is reachable from anywhere: `check` and the pack both hold it to
    # `public_ports`, with a fix that keeps the URL (not `exposure: host`). On a loopback ingress it is not public.
    data = changed(("hosts.local.ingress", {"domain": "sb.example.com", "exposure": exposure}),
                   ("templates.agent.ports", [{"port": 8080, "exposure": "public"},
                                              {"port": 3000, "exposure": "url", "name": "web"}]))
    built = Built.from_spec(tmp_path / "spec", data, secret_config={"githubToken": "t"})
    containers = _containers(built)
    config = {"publicPorts": [8080], "untrusted": True}
    # The routes are the ingress's configuration: its reload container holds them.
    assert {name: _violations(props, name, config, urn) for name, (props, urn) in containers.items()} == {
        name: pack if name == "sandstack-local-ingress-reload" else [] for name in containers}
    report = check([str(write_spec(tmp_path / "check", data))], [])
    assert [(f.message, f.remediation) for f in report.active() if f.rule == "SBX-PORT-001"] == check_messages


def test_the_pack_reads_the_ingress_s_routes_as_the_plan_writes_them():
    sites = (Site("3000-a-0.sb.example.com", "sandstack-t-a-0", 3000), Site("8000-a-0.sb.example.com",
             "sandstack-t-a-0", 8000), Site("3000-b-1.sb.example.com", "sandstack-t-b-1", 3000))
    for exposure, served in (("public", {"sandstack-t-a-0": (3000, 8000), "sandstack-t-b-1": (3000,)}), ("host", {})):
        plan = IngressPlan("t", Ingress(domain="sb.example.com", exposure=exposure), (), sites)
        # Its reload container's environment: its configuration, the Caddyfile and where it listens.
        props = {"envs": plan.config.env("sandstack-t_ingress")}
        assert served_url_ports(props) == served
        # The ingress container itself holds no route: what it serves is its configuration.
        assert served_url_ports({"envs": plan.env, "ports": [{"internal": i, "external": e, "ip": plan.bind_ip}
                                                             for i, e in plan.ports]}) == {}
