"""The preview's resource list is exactly what the Pulumi program registers under mocks, for every
committed stack and for a stack with every kind of object (secrets, push, TLS), down to each container's
and network's Docker name and each sandbox's image."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandstack.review.resources import CONTAINER, NETWORK, REGISTRY_IMAGE, stack_resources
from sandstack.spec import load_stack
from tests.components.helpers import Built
from testbed.provider.mocks import DryBackend, RecordingMocks
from testbed.specs import STACKS, host, secret_keys, spec, write_spec

STACK_FILES = sorted(STACKS.glob("*.yaml"))


def _check(path: Path, stack: str, tmp_path: Path) -> None:
    resolved = load_stack(path)
    secrets = {key: f"value-of-{key}" for key in secret_keys(resolved.spec.model_dump())}
    # RegistryImage (push_to) is not in the provider model: recorded as is.
    mocks = RecordingMocks(DryBackend(extra_types={REGISTRY_IMAGE: lambda reg: ("pushed", dict(reg.inputs))}))
    built = Built.from_path(path, stack=stack, secret_config=secrets, build_root=tmp_path / "build", mocks=mocks)
    registered = {(r.typ, r.name) for r in built.mocks.registrations.values() if r.typ != "pulumi:pulumi:Stack"}
    resources = stack_resources(resolved, stack)
    assert len({(r.type, r.name) for r in resources}) == len(resources)
    assert {(r.type, r.name) for r in resources} == registered
    regs = {(r.typ, r.name): r for r in built.mocks.registrations.values()}
    for r in resources:
        if r.type in (CONTAINER, NETWORK):
            assert regs[(r.type, r.name)].inputs["name"] == r.props["name"], r.name
        if r.kind == "sandbox":
            image = regs[(r.type, r.name)].inputs["image"]
            assert image, r.name  # the snapshot's image id: the preview shows its name instead
            assert regs[(r.type, r.name)].inputs["hostname"] == r.props["hostname"]


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.stem)
def test_the_preview_lists_exactly_what_the_program_registers(path: Path, tmp_path: Path):
    _check(path, path.stem, tmp_path)


def test_secrets_push_and_tls_objects_are_listed_too(tmp_path: Path):
    data = spec(
        {"agent": {"base_image": "busybox:1.36", "snapshot": {"push_to": "registry.example.com/agent"},
                   "secrets": [{"secret": "token", "path": "/run/secrets/token"}],
                   "env": {"TOKEN": {"secret": "token2"}, "MODE": "x"}},
         "agent-b": {"base_image": "busybox:1.36"}},
        pools={"agent": {"template": "agent", "hosts": ["local", "remote"], "replicas": 2},
               "agent-b": {"template": "agent-b", "hosts": ["remote"], "replicas": 0}},
        hosts={"local": host(), "remote": host("tcp://docker.example.com:2376", tls={
            "ca": {"secret": "ca"}, "cert": {"secret": "cert"}, "key": {"secret": "key"}})},
    )
    path = write_spec(tmp_path / "spec", data)
    _check(path, "t", tmp_path)
    sandbox = next(r for r in stack_resources(load_stack(path), "t") if r.name == "sandstack-agent.local-0")
    # Secret env shows its key only; plain env stays readable beside it.
    assert sandbox.props["env"]["TOKEN"] == {"secret": "token2"} and sandbox.props["env"]["MODE"] == "x"


def test_the_review_reads_the_plan_and_derives_nothing_again(monkeypatch):
    """Review issue 20.4: every resource's settings come from the StackPlan's nodes and the plans kept beside them
    (a pool's secrets and data, a snapshot's image); the plan functions are not run again for display."""
    import sandstack.plan.data
    import sandstack.plan.secrets
    import sandstack.plan.snapshot
    import sandstack.review.resources as resources
    from sandstack.plan.stack import plan_stack

    resolved = load_stack(STACKS / "prod.yaml")
    plan = plan_stack(resolved, "prod")
    expected = stack_resources(resolved, "prod", plan=plan)
    kinds = {r.kind for r in expected}
    assert {"data volume", "data loader", "secrets volume", "secrets seeder", "snapshot"} <= kinds

    def again(*args, **kwargs):
        raise AssertionError("planned again for the review")

    for module in (sandstack.plan.data, sandstack.plan.secrets, sandstack.plan.snapshot, resources):
        for name in ("plan_data", "plan_secrets", "plan_snapshot", "plan_stack"):
            monkeypatch.setattr(module, name, again, raising=False)
    assert stack_resources(resolved, "prod", plan=plan) == expected
    volumes = [r for r in expected if r.kind == "data volume"]
    by_key = {n.key: n for n in plan}
    assert [r.props["name"] for r in volumes] == [by_key[f"{r.type}::{r.name}"].inputs["name"] for r in volumes]
