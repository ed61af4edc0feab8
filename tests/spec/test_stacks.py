"""The committed stacks validate, and resolution applies profiles, defaults and built-ins as documented."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandstack.spec import SpecError, check_file, load_stack
from sandstack.spec.egress import EgressRule
from sandstack.spec.models import GpuRequest, SecretRef, WritablePath
from sandstack.spec.resolve import EffectiveLifecycle, EffectiveLimits
from tests.spec.helpers import FIXTURES, STACKS, edit, fixture_text

MiB, GiB = 1024**2, 1024**3


@pytest.mark.parametrize("name", ["dev.yaml", "prod.yaml"])
def test_committed_stack_has_no_diagnostics(name: str) -> None:
    result = check_file(STACKS / name)
    assert result.diagnostics == []
    assert result.stack is not None


@pytest.mark.parametrize("name", ["minimal.yaml", "rules.yaml"])
def test_happy_path_fixtures_are_valid(name: str) -> None:
    assert check_file(FIXTURES / name).diagnostics == []


@pytest.fixture(scope="module")
def dev():
    return load_stack(STACKS / "dev.yaml")


@pytest.fixture(scope="module")
def prod():
    return load_stack(STACKS / "prod.yaml")


def test_dev_profile_plus_override_keeps_profile_fields_and_replaces_one(dev) -> None:
    # python: {profile: medium, pids: 512} over defaults `small`.
    assert dev.templates["python"].limits == EffectiveLimits(cpus=1.0, memory=1 * GiB, disk=1 * GiB, pids=512, open_files=1024)


def test_prod_profile_plus_override_replaces_two_fields(prod) -> None:
    # python: {profile: small, memory: 2GiB, disk: 2GiB}; small is 0.5 CPU, 512MiB, 1GiB, 256 pids.
    assert prod.templates["python"].limits == EffectiveLimits(cpus=0.5, memory=2 * GiB, disk=2 * GiB, pids=256,
                                                              open_files=1024)


def test_template_without_limits_gets_the_defaults_profile(dev) -> None:
    assert dev.templates["shell"].limits == EffectiveLimits(cpus=0.5, memory=256 * MiB, disk=256 * MiB, pids=128, open_files=1024)


def test_profile_name_brings_its_gpu_request(prod) -> None:
    assert prod.templates["trainer"].limits == EffectiveLimits(
        cpus=8.0, memory=64 * GiB, disk=64 * GiB, pids=4096, open_files=1024, gpus=GpuRequest(count=1, type="nvidia-l4")
    )


def test_builtins_apply_where_nothing_is_set(tmp_path: Path) -> None:
    (tmp_path / "stack.yaml").write_text(fixture_text("minimal.yaml"))
    shell = load_stack(tmp_path / "stack.yaml").templates["shell"]
    assert shell.limits == EffectiveLimits(cpus=1.0, memory=512 * MiB, disk=1 * GiB, pids=256, open_files=1024, gpus=None)
    assert shell.user == "10001:10001"
    assert shell.runtime == "runc"
    assert shell.lifecycle == EffectiveLifecycle(max_lifetime=24 * 3600, idle_timeout=0, on_expiry="stop")
    assert shell.writable == (WritablePath(path="/tmp", size=64 * MiB, exec=False),)
    assert shell.shm_size == 16 * MiB
    assert (shell.read_only_root, shell.privileged, shell.no_new_privileges) == (True, False, True)
    assert shell.capabilities == ()
    assert shell.network.egress == "deny-all" and shell.network.log is False
    assert shell.network.allow_metadata is False
    assert shell.env == {} and shell.workdir is None and shell.snapshot_version is None


def test_lifecycle_defaults_merge_field_by_field(dev, prod) -> None:
    assert dev.templates["shell"].lifecycle == EffectiveLifecycle(max_lifetime=8 * 3600, idle_timeout=30 * 60,
                                                                  on_expiry="stop")
    assert prod.templates["browser"].lifecycle == EffectiveLifecycle(max_lifetime=4 * 3600, idle_timeout=15 * 60,
                                                                     on_expiry="restart")


@pytest.mark.parametrize(
    ("template", "egress", "log"),
    [("shell", "deny-all", False), ("python", "allow-list", True), ("preview", "allow-all", True),
     ("builder", "allow-all", True)],
)
def test_log_defaults_on_for_allow_modes_off_for_deny_all(dev, template: str, egress: str, log: bool) -> None:
    network = dev.templates[template].network
    assert (network.egress, network.log) == (egress, log)
    # Logged allow-all uses the gateway unless it takes any protocol directly (builder: `protocols: any`).
    assert network.uses_gateway is (egress == "allow-list" or (egress == "allow-all" and log and template != "builder"))
    assert network.logs_connections is (template == "builder")


def test_egress_entries_resolve_to_parsed_rules(dev, prod) -> None:
    python = dev.templates["python"].network
    assert python.allow == (
        EgressRule("domain", "api.github.com"),
        EgressRule("wildcard", "githubusercontent.com"),
        EgressRule("domain", "huggingface.co", 443),
    )
    assert python.deny == (EgressRule("domain", "gist.githubusercontent.com"),)
    assert prod.templates["python"].network.allow[2] == EgressRule("cidr", "10.20.0.0/16", 443)
    assert prod.templates["browser"].network.deny == (
        EgressRule("cidr", "169.254.169.254/32"),
        EgressRule("cidr", "10.0.0.0/8"),
    )


def test_env_merges_template_over_defaults(prod) -> None:
    assert prod.templates["python"].env == {
        "SANDSTACK_STACK": "prod",
        "LOG_LEVEL": "info",
        "AGENT_API_TOKEN": SecretRef(secret="agentApiToken"),
    }
    assert prod.templates["browser"].env == {"SANDSTACK_STACK": "prod"}


def test_template_env_wins_over_the_same_default_variable(tmp_path: Path) -> None:
    text = edit(fixture_text("minimal.yaml"), "templates:\n", "defaults:\n  env: {A: one, B: two}\ntemplates:\n")
    text = edit(text, '    command: ["sh"]\n', '    command: ["sh"]\n    env: {B: three}\n')
    (tmp_path / "stack.yaml").write_text(text)
    assert load_stack(tmp_path / "stack.yaml").templates["shell"].env == {"A": "one", "B": "three"}


def test_network_is_taken_whole_from_the_template_never_unioned(tmp_path: Path) -> None:
    text = edit(
        fixture_text("rules.yaml"),
        "defaults:\n  limits: small\n",
        "defaults:\n  limits: small\n  network:\n    egress: allow-list\n    allow: [default.example.com]\n"
        "    deny: [deny.example.com]\n",
    )
    text = edit(text, "templates:\n", "templates:\n  plain:\n    base_image: busybox:1.36\n")
    (tmp_path / "agent.py").write_text("")
    (tmp_path / "stack.yaml").write_text(text)
    stack = load_stack(tmp_path / "stack.yaml")
    assert stack.templates["web"].network.allow == (EgressRule("domain", "api.example.com"),)
    assert stack.templates["web"].network.deny == ()
    assert stack.templates["plain"].network.allow == (EgressRule("domain", "default.example.com"),)
    assert stack.templates["plain"].network.deny == (EgressRule("domain", "deny.example.com"),)


def test_explicit_empty_writable_list_means_no_writable_paths(tmp_path: Path) -> None:
    text = edit(fixture_text("minimal.yaml"), '    command: ["sh"]\n',
                '    command: ["sh"]\n    filesystem: {writable: []}\n')
    (tmp_path / "stack.yaml").write_text(text)
    assert load_stack(tmp_path / "stack.yaml").templates["shell"].writable == ()


def test_snapshot_files_resolve_next_to_the_stack_file(dev) -> None:
    (agent,) = dev.templates["python"].files
    assert agent.source == STACKS / "files" / "agent_api.py"
    assert (agent.path, agent.mode) == ("/opt/sandbox/agent_api.py", "0644")


def test_prod_hosts_pools_and_runtime(prod) -> None:
    assert list(prod.hosts) == ["sbx-a", "sbx-b", "gpu-a"]
    assert prod.hosts["gpu-a"].capacity.memory == 384 * GiB
    assert prod.hosts["sbx-a"].overcommit.cpus == 2.0
    assert {name: (p.template, p.hosts, p.replicas) for name, p in prod.pools.items()} == {
        "python-warm": ("python", ["sbx-a", "sbx-b"], 16),
        "browser-warm": ("browser", ["sbx-a", "sbx-b"], 4),
        "trainer": ("trainer", ["gpu-a"], 2),
    }
    assert prod.templates["browser"].runtime == "runsc"
    assert prod.templates["python"].snapshot_version == "2026-11-21.1"


def test_load_stack_raises_spec_error_with_exactly_the_validate_lines(tmp_path: Path, capsys) -> None:
    from sandstack.tooling.cli import main

    text = edit(fixture_text("rules.yaml"), "    template: web\n", "    template: wbe\n")
    text = edit(text, "      memory: 8GiB\n", "      memory: 8 GiB!\n")
    path = tmp_path / "stack.yaml"
    path.write_text(text)
    (tmp_path / "agent.py").write_text("")
    with pytest.raises(SpecError) as caught:
        load_stack(path)
    assert main(["validate", str(path)]) == 1
    printed = capsys.readouterr().out
    assert str(caught.value) + "\n" == printed
    assert str(caught.value) == (
        f"{path}:8:15: $.hosts.local.capacity.memory: '8 GiB!' is not a valid size: use an integer number of "
        "bytes or a number with a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. '512MiB'"
    )


def test_load_stack_reports_every_semantic_error_at_once(tmp_path: Path) -> None:
    text = edit(fixture_text("rules.yaml"), "    template: web\n", "    template: wbe\n")
    text = edit(text, "        - api.example.com\n", "        - '*'\n")
    (tmp_path / "stack.yaml").write_text(text)
    (tmp_path / "agent.py").write_text("")
    with pytest.raises(SpecError) as caught:
        load_stack(tmp_path / "stack.yaml", "stack.yaml")
    assert str(caught.value).splitlines() == [
        "stack.yaml:31:11: $.templates.web.network.allow[0]: '*' would allow every destination: use "
        "`egress: allow-all` instead",
        "stack.yaml:45:15: $.pools.web.template: template 'wbe' is not defined; templates: web",
    ]
    assert [d.rule for d in caught.value.diagnostics] == ["egress-entry", "ref-template"]


def test_defaults_written_in_units_resolve_to_bytes_and_seconds(tmp_path: Path) -> None:
    """A writable path without `size` and a readiness probe without timings get parsed defaults, not '64MiB'."""
    text = edit(fixture_text("minimal.yaml"), '    command: ["sh"]\n',
                '    command: ["sh"]\n    filesystem: {writable: [{path: /work}]}\n'
                '    readiness: {command: [/bin/true]}\n')
    (tmp_path / "stack.yaml").write_text(text)
    shell = load_stack(tmp_path / "stack.yaml").templates["shell"]
    assert shell.writable == (WritablePath(path="/work", size=64 * MiB),)
    assert shell.writable[0].size == 64 * MiB
    assert shell.readiness is not None
    assert (shell.readiness.interval, shell.readiness.timeout, shell.readiness.retries,
            shell.readiness.start_period) == (10, 5, 3, 0)


def test_allow_metadata_is_off_in_every_mode_unless_the_policy_opts_in(dev, tmp_path: Path) -> None:
    assert {name: t.network.allow_metadata for name, t in dev.templates.items()} == {
        "shell": False, "python": False, "preview": False, "builder": False}
    text = edit(fixture_text("rules.yaml"), "        - api.example.com\n",
                "        - api.example.com\n      allow_metadata: true\n")
    (tmp_path / "agent.py").write_text("")
    (tmp_path / "stack.yaml").write_text(text)
    assert load_stack(tmp_path / "stack.yaml").templates["web"].network.allow_metadata is True


def test_unlogged_allow_all_carries_its_address_deny_entries(tmp_path: Path) -> None:
    text = edit(fixture_text("rules.yaml"), "      egress: allow-list\n      allow:\n        - api.example.com\n",
                "      egress: allow-all\n      log: false\n      deny: [169.254.169.254, '10.0.0.0/8:443']\n")
    (tmp_path / "agent.py").write_text("")
    (tmp_path / "stack.yaml").write_text(text)
    network = load_stack(tmp_path / "stack.yaml").templates["web"].network
    assert (network.egress, network.log, network.uses_gateway) == ("allow-all", False, False)
    assert network.deny == (EgressRule("cidr", "169.254.169.254/32"), EgressRule("cidr", "10.0.0.0/8", 443))


def test_shm_size_merges_field_by_field_template_over_defaults(tmp_path: Path) -> None:
    text = edit(fixture_text("minimal.yaml"), "templates:\n",
                "defaults:\n  filesystem: {shm_size: 8MiB}\ntemplates:\n  other:\n    base_image: busybox:1.36\n"
                "    filesystem: {shm_size: 32MiB, writable: []}\n")
    (tmp_path / "stack.yaml").write_text(text)
    stack = load_stack(tmp_path / "stack.yaml")
    assert stack.templates["shell"].shm_size == 8 * MiB
    assert stack.templates["shell"].writable == (WritablePath(path="/tmp", size=64 * MiB),)
    assert (stack.templates["other"].shm_size, stack.templates["other"].writable) == (32 * MiB, ())


def test_open_files_merge_like_every_limit(tmp_path: Path) -> None:
    text = edit(fixture_text("rules.yaml"), "    disk: 256MiB\n", "    disk: 256MiB\n    open_files: 4096\n")
    text = edit(text, "      memory: 512MiB\n", "      memory: 512MiB\n      open_files: 256\n")
    text = edit(text, "templates:\n", "templates:\n  plain:\n    base_image: busybox:1.36\n")
    (tmp_path / "agent.py").write_text("")
    (tmp_path / "stack.yaml").write_text(text)
    stack = load_stack(tmp_path / "stack.yaml")
    assert (stack.templates["web"].limits.open_files, stack.templates["plain"].limits.open_files) == (256, 4096)
