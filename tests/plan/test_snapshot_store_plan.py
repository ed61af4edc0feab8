"""The snapshot store in the plan (docs/design/snapshot-store.md): its registry, repository and user in the runtime's
configuration (taken in place), its password and CA only in the runtime container's environment, from their
secrets; a runtime without a store planned exactly as before; a missing or plain-text password a located error."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandstack.plan.runtime import ENV_STORE_CA, ENV_STORE_PASSWORD, RuntimeConfig, SnapshotStore
from sandstack.plan.stack import plan_stack
from sandstack.plan.tree import Secret
from sandstack.spec import load_data
from sandstack.spec.errors import SpecError
from testbed.specs import host, spec

RUNTIME = {"token": {"secret": "runtimeToken"}}
STORE = {"registry": "https://registry.internal:5000", "repository": "sandstack/prod", "username": "snapshots",
         "password": {"secret": "storePassword"}}


def _data(runtime: dict) -> dict:
    return spec({"web": {"base_image": "busybox:1.36"}}, hosts={"local": host(runtime=runtime)})


def _runtime_container(plan):
    return next(n for k, n in plan.nodes.items() if k.endswith("-local-runtime-container"))


def test_the_store_is_in_the_config_and_its_secrets_in_the_environment_only(tmp_path: Path):
    plan = plan_stack(load_data(_data({**RUNTIME, "snapshot_store": {**STORE, "ca": {"secret": "storeCa"}}}),
                                tmp_path), "t")
    config = plan.hosts["local"].runtime.config
    assert config.snapshot_store == SnapshotStore("https://registry.internal:5000", "sandstack/prod", "snapshots",
                                                  ca=True)
    assert RuntimeConfig.from_json(config.to_json()) == config
    envs = _runtime_container(plan).inputs["envs"]
    assert Secret("storePassword", f"{ENV_STORE_PASSWORD}={{}}") in envs
    assert Secret("storeCa", f"{ENV_STORE_CA}={{}}") in envs
    assert "storePassword" not in config.to_json()


def test_a_runtime_without_a_store_has_none_and_its_config_reads_as_before(tmp_path: Path):
    plan = plan_stack(load_data(_data(RUNTIME), tmp_path), "t")
    config = plan.hosts["local"].runtime.config
    assert config.snapshot_store is None and "snapshot_store" not in config.to_json()
    envs = _runtime_container(plan).inputs["envs"]
    assert not any(isinstance(e, Secret) and e.text.startswith((ENV_STORE_PASSWORD, ENV_STORE_CA)) for e in envs)


@pytest.mark.parametrize(("password", "path", "message"), [
    (None, "$.hosts.local.runtime.snapshot_store",
     "missing required field 'password' (its password, from a Pulumi secret (never printed))"),
    ("hunter2-store-password", "$.hosts.local.runtime.snapshot_store.password",
     "expected {secret: KEY}, got a plain string (value not shown)"),
])
def test_a_missing_or_plain_password_is_a_located_error_that_never_shows_a_value(tmp_path, password, path, message):
    store = {k: v for k, v in STORE.items() if k != "password"}
    if password is not None:
        store["password"] = password
    with pytest.raises(SpecError) as refused:
        load_data(_data({**RUNTIME, "snapshot_store": store}), tmp_path)
    found = [(d.path, d.message) for d in refused.value.diagnostics]
    assert found == [(path, message)]
    assert "hunter2" not in str(refused.value)
