"""components/lean.py registers pulumi-docker resources with their set inputs only: the engine must receive exactly
what the generated constructors sent, request for request, and the resources must keep what sandstack reads."""

from __future__ import annotations

import pulumi
import pulumi_docker as docker
import pytest

from sandstack.components import lean
from sandstack.spec import load_stack
from testbed.provider import mocks as recording
from testbed.specs import secret_keys
from tests.components.helpers import STACKS, Built


def _requests(monkeypatch, path, tmp_path) -> dict[str, bytes]:
    """Every RegisterResource request of the stack at `path`, serialized, by URN; the source position and stack
    trace (where in Python the resource was created) left out: they are not sent to the provider. Dependencies are
    sorted: the SDK collects them in a set, so their order differs from run to run whichever constructor is used."""
    seen: dict[str, bytes] = {}
    original = recording.HarnessMonitor.RegisterResource

    def record(self, request):
        copy = type(request)()
        copy.CopyFrom(request)
        copy.ClearField("sourcePosition")
        copy.ClearField("stackTrace")
        for urns in [copy.dependencies] + [deps.urns for deps in copy.propertyDependencies.values()]:
            ordered = sorted(urns)
            del urns[:]
            urns.extend(ordered)
        seen[self.make_urn(request.parent, request.type, request.name)] = copy.SerializeToString(deterministic=True)
        return original(self, request)

    with monkeypatch.context() as patch:
        patch.setattr(recording.HarnessMonitor, "RegisterResource", record)
        secrets = {k: f"value-of-{k}" for k in secret_keys(load_stack(path).spec.model_dump())}
        Built.from_path(path, stack=path.stem, secret_config=secrets, build_root=tmp_path)
    return seen


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_engine_receives_what_the_generated_constructors_sent(monkeypatch, tmp_path, stack: str) -> None:
    path = STACKS / f"{stack}.yaml"
    lean_requests = _requests(monkeypatch, path, tmp_path)
    monkeypatch.setattr(lean, "ARGS", {})  # every resource through its generated constructor, as before
    generated = _requests(monkeypatch, path, tmp_path)
    assert sorted(lean_requests) == sorted(generated)
    custom = [urn for urn in generated if "docker:index/" in urn]
    assert len(custom) > 20
    assert {urn for urn in generated if lean_requests[urn] != generated[urn]} == set()


def test_the_computed_properties_are_the_generated_constructors_output_only_ones() -> None:
    assert lean.computed(docker.Container) == ("bridge", "container_logs", "exit_code", "network_datas")
    assert lean.computed(docker.RemoteImage) == ("image_id", "repo_digest")
    assert lean.computed(docker.Network) == ("scope",)
    assert lean.computed(docker.Volume) == ("mountpoint",)


def test_a_lean_container_has_its_inputs_and_computed_outputs_and_no_output_for_an_unset_argument() -> None:
    def program() -> None:
        container = lean.Registration(docker.Container, "docker:index/container:Container", "c",
                                      {"name": "c", "image": "busybox", "user": None},
                                      pulumi.ResourceOptions()).resource
        assert isinstance(container, docker.Container)
        assert all(isinstance(getattr(container, a), pulumi.Output)
                   for a in ("name", "image", "exit_code", "bridge"))
        assert container.user is None and container.hostname is None  # unset: no Output, and nothing reads them
        pulumi.export("values", pulumi.Output.all(container.name, container.image))

    result = recording.run_program(program, recording.RecordingMocks())
    assert result.outputs["values"] == ["c", "busybox"]
    (registration,) = result.mocks.by_type("docker:index/container:Container")
    assert registration.inputs == {"name": "c", "image": "busybox"}
