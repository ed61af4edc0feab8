"""The runtime's SSH endpoint in the plan (docs/design/ssh.md): its port in the runtime's configuration and its
container's environment (a change renews the container, which binds it at start), its host key from the declared
secret only there, and a runtime without `ssh` planned exactly as before."""

from __future__ import annotations

from pathlib import Path

from sandstack.plan.runtime import ENV_SSH_HOST_KEY, RuntimeConfig
from sandstack.plan.runtime_host import ENV_SSH_PORT
from sandstack.plan.stack import plan_stack
from sandstack.plan.tree import Secret
from sandstack.spec import load_data
from testbed.specs import host, spec

RUNTIME = {"token": {"secret": "runtimeToken"}}
SSH = {"port": 2200, "host_key": {"secret": "sshHostKey"}}


def _plan(tmp_path: Path, runtime: dict):
    data = spec({"web": {"base_image": "busybox:1.36"}}, hosts={"local": host(runtime=runtime)})
    return plan_stack(load_data(data, tmp_path), "t")


def _runtime_container(plan):
    return next(n for k, n in plan.nodes.items() if k.endswith("-local-runtime-container"))


def test_the_ssh_port_is_in_the_config_and_the_environment_and_the_host_key_from_its_secret(tmp_path):
    plan = _plan(tmp_path, {**RUNTIME, "ssh": SSH})
    config = plan.hosts["local"].runtime.config
    assert config.ssh_port == 2200
    assert RuntimeConfig.from_json(config.to_json()) == config
    envs = _runtime_container(plan).inputs["envs"]
    assert f"{ENV_SSH_PORT}=2200" in envs
    assert Secret("sshHostKey", f"{ENV_SSH_HOST_KEY}={{}}") in envs


def test_a_runtime_without_ssh_has_neither_and_its_config_reads_as_before(tmp_path):
    plan = _plan(tmp_path, RUNTIME)
    config = plan.hosts["local"].runtime.config
    assert config.ssh_port is None and "ssh_port" not in config.to_json()
    envs = _runtime_container(plan).inputs["envs"]
    assert not any(isinstance(e, str) and e.startswith(ENV_SSH_PORT) for e in envs)
    assert not any(isinstance(e, Secret) and e.text.startswith(ENV_SSH_HOST_KEY) for e in envs)


def test_forwarding_and_the_bound_per_source_are_in_the_config_only_with_ssh(tmp_path):
    declared = _plan(tmp_path, {**RUNTIME, "ssh": {**SSH, "forwarding": "local", "max_connections_per_source": 4}})
    config = declared.hosts["local"].runtime.config
    assert (config.ssh_forwarding, config.ssh_per_source) == (True, 4)
    assert RuntimeConfig.from_json(config.to_json()) == config
    default = _plan(tmp_path, {**RUNTIME, "ssh": SSH}).hosts["local"].runtime.config
    assert (default.ssh_forwarding, default.ssh_per_source) == (False, 16)  # forwarding off by default
    text = _plan(tmp_path, RUNTIME).hosts["local"].runtime.config.to_json()
    assert "ssh_forwarding" not in text and "ssh_per_source" not in text
