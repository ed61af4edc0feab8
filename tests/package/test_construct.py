"""The package as Pulumi runs it, without the CLI: the plugin process (`python package/ ENGINE`, which prints its
port) answers GetSchema with the committed schema, and a Construct of `sandstack:index:SandboxStack` registers,
through a recording resource monitor, exactly the resources the Python program registers for the same spec, and
returns its outputs; an invalid spec comes back as Pulumi input errors with sandstack's located messages.

The typed `spec` input has its own module (test_construct_typed.py), which uses these helpers.

What this cannot prove: what the Pulumi CLI does around it (installing the plugin's virtualenv, `pulumi package add`
generating SDKs, the engine turning the errors into its own display, and the real engine's URN for a remote
component, which Pulumi's mocks build with the stack's type in the parent chain just as the Python program's run).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import grpc
import pytest
import yaml
from google.protobuf import struct_pb2
from pulumi.runtime import rpc
from pulumi.runtime.proto import errors_pb2, provider_pb2, provider_pb2_grpc, status_pb2

from sandstack.package.spec_types import spec_types
from sandstack.program import build_stack, program
from sandstack.spec import load_stack
from testbed.provider.mocks import RecordingMocks, run_program, unwrap
from testbed.specs import STACKS, secret_keys
from tests.package.engine import REPO, engine, plugin

PROJECT = "sandstack"
TOKEN = "sandstack:index:SandboxStack"
NAME = "agents"


def stack_urn(stack: str) -> str:
    return f"urn:pulumi:{stack}::{PROJECT}::pulumi:pulumi:Stack::{PROJECT}-{stack}"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One plugin process for the module, as Pulumi keeps one per deployment, run in the program's directory."""
    program_dir = tmp_path_factory.mktemp("program")
    with engine() as eng, plugin(eng.address, program_dir) as plug:
        with grpc.insecure_channel(plug.address) as channel:
            yield eng, provider_pb2_grpc.ResourceProviderStub(channel), program_dir, plug


def construct(stub, eng, stack: str, inputs: dict, secrets: dict[str, str],
              preview: bool = False) -> tuple[provider_pb2.ConstructResponse, RecordingMocks]:
    mocks = eng.record(PROJECT, stack)
    struct = struct_pb2.Struct()
    struct.update(inputs)
    request = provider_pb2.ConstructRequest(
        project=PROJECT, stack=stack, config={f"{PROJECT}:{k}": v for k, v in secrets.items()},
        configSecretKeys=[f"{PROJECT}:{k}" for k in secrets], monitorEndpoint=eng.address, type=TOKEN, name=NAME,
        parent=stack_urn(stack), inputs=struct, dryRun=preview)
    return stub.Construct(request, timeout=180), mocks


def python_program(spec: Path, stack: str, secrets: dict[str, str],
                   preview: bool = False) -> tuple[RecordingMocks, dict]:
    """What a Python program (`sandstack.program.program`) registers and exports for the same spec."""
    mocks = RecordingMocks()
    result = run_program(lambda: program(spec, name=NAME), mocks, project=PROJECT, stack=stack,
                         secret_config=secrets, preview=preview)
    return mocks, result.outputs


def registrations(mocks: RecordingMocks) -> dict[str, tuple]:
    return {urn: (r.typ, r.name, r.custom, r.inputs, sorted(r.secret_paths), r.provider, r.request.parent,
                  sorted(r.request.dependencies), r.request.replace_on_changes, r.request.delete_before_replace,
                  r.request.ignore_changes)
            for urn, r in mocks.registrations.items()}


def test_get_schema_answers_the_committed_schema(served):
    _, stub, _, _ = served
    answer = stub.GetSchema(provider_pb2.GetSchemaRequest(version=0), timeout=60)
    assert json.loads(answer.schema) == json.loads((REPO / "package" / "schema.json").read_text())
    assert TOKEN in json.loads(answer.schema)["resources"]


@pytest.mark.parametrize(("stack", "given"), [("dev", "specYaml"), ("prod", "specYaml"), ("dev", "specFile")])
def test_construct_registers_what_the_python_program_registers(served, monkeypatch, stack: str, given: str):
    eng, stub, program_dir, _ = served
    spec = STACKS / f"{stack}.yaml"
    secrets = {key: f"value-of-{key}" for key in secret_keys(load_stack(spec).spec.model_dump())}
    local = program_dir / spec.name  # a spec file relative to the program's directory, as a consumer gives it
    shutil.copy(spec, local)
    for extra in spec.parent.iterdir():  # what the spec's relative paths name (snapshot files, data)
        if extra.is_dir() and not (program_dir / extra.name).exists():
            shutil.copytree(extra, program_dir / extra.name)
    monkeypatch.chdir(program_dir)  # the Python program runs where the plugin does (relative build folders)
    expected, outputs = python_program(Path(spec.name), stack, secrets)

    inputs = {"specYaml": spec.read_text()} if given == "specYaml" else {"specFile": spec.name}
    response, got = construct(stub, eng, stack, inputs, secrets)

    assert response.urn == f"urn:pulumi:{stack}::{PROJECT}::pulumi:pulumi:Stack${TOKEN}::{NAME}"
    assert registrations(got) == registrations(expected)
    assert len(got.registrations) > 10 and got.by_type("docker:index/container:Container")
    state = unwrap(rpc.deserialize_properties(response.state, keep_unknowns=True))
    # sandboxes, hosts and runtime: what the Python program exports (Pulumi's wire format has no null properties)
    assert state == without_nulls(outputs)
    assert ("runtime" in state) == (stack == "dev")


def test_a_preview_construct_registers_what_the_python_programs_preview_registers(served, monkeypatch):
    # `pulumi preview`: the engine constructs with dryRun, and the outputs Docker computes are unknown.
    eng, stub, program_dir, _ = served
    spec = STACKS / "dev.yaml"
    secrets = {key: f"value-of-{key}" for key in secret_keys(load_stack(spec).spec.model_dump())}
    monkeypatch.chdir(program_dir)
    expected, _ = python_program(spec, "dev", secrets, preview=True)
    response, got = construct(stub, eng, "dev", {"specFile": str(spec)}, secrets, preview=True)
    assert registrations(got) == registrations(expected)
    assert response.urn.endswith(f"::{NAME}")


def examples_spec_in_name_order() -> dict:
    """examples/sandboxes.yaml, its maps in name order (as a typed spec's come: test below)."""
    return json.loads(json.dumps(yaml.safe_load((REPO / "examples" / "sandboxes.yaml").read_text()), sort_keys=True))


def test_the_yaml_examples_inputs_construct_what_build_stack_builds(served, monkeypatch):
    eng, stub, program_dir, _ = served
    program = yaml.safe_load((REPO / "examples" / "yaml" / "Pulumi.yaml").read_text())
    props = program["resources"][NAME]["properties"]
    allowed = program["config"]["allowedApi"]["default"]  # what `${allowedApi}` is without config
    spec = json.loads(json.dumps(props["spec"]).replace("${allowedApi}", allowed))
    monkeypatch.chdir(program_dir)
    expected = RecordingMocks()
    run_program(lambda: build_stack(examples_spec_in_name_order(), name=NAME, stack=props["stack"]), expected,
                project=PROJECT, stack="dev")

    _, got = construct(stub, eng, "dev", {"spec": spec, "stack": props["stack"]}, {})
    assert registrations(got) == registrations(expected)
    assert len(got.by_type("docker:index/container:Container")) >= 3  # the example's three sandboxes, and more


def test_the_typescript_examples_inputs_construct_what_build_stack_builds(served, monkeypatch):
    from tests.package.test_examples import OPAQUE, typescript_args
    eng, stub, program_dir, _ = served
    spec = typescript_args()["spec"]
    assert spec["templates"]["python"]["baseImage"] is OPAQUE  # `python.repoDigest`: the engine sends its value
    digest = "python@sha256:" + "b" * 64
    spec["templates"]["python"]["baseImage"] = output_value(digest, [IMAGE])
    monkeypatch.chdir(program_dir)
    data = examples_spec_in_name_order()
    data["templates"]["python"]["base_image"] = digest
    expected = RecordingMocks()
    run_program(lambda: build_stack(data, name=NAME, stack="dev"), expected, project=PROJECT, stack="dev")

    _, got = construct(stub, eng, "dev", {"spec": spec, "stack": "dev"}, {})
    # The same resources; the python template's image also depends on the resource its base image came from.
    got_regs, expected_regs = registrations(got), registrations(expected)
    assert set(got_regs) == set(expected_regs)
    [image] = [u for u in got_regs if got_regs[u] != expected_regs[u]]
    assert image.endswith("::agents-python.local-image")
    deps = 7  # registrations(): the resource's dependencies
    assert got_regs[image][:deps] + got_regs[image][deps + 1:] == expected_regs[image][:deps] + expected_regs[image][
        deps + 1:]
    assert set(got_regs[image][deps]) == set(expected_regs[image][deps]) | {IMAGE}


def without_nulls(value):
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def input_errors(error: grpc.RpcError) -> list[tuple[str, str]]:
    """The InputPropertiesError details of a gRPC status, as Pulumi's engine reads them."""
    details = dict(error.trailing_metadata())["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(details)
    out = []
    for any_detail in status.details:
        found = errors_pb2.InputPropertiesError()
        assert any_detail.Unpack(found)
        out += [(e.property_path, e.reason) for e in found.errors]
    return out


BAD_SPEC = """\
version: 1
hosts:
  local:
    endpoint: unix:///var/run/docker.sock
    capacity: {cpus: 2, memory: 4GiB, disk: 20GiB}
templates:
  python:
    base_image: python:3.12-slim
    network: {egress: allow-some}
pools:
  python: {template: python, hosts: [local], replicas: 1}
"""


def test_an_invalid_spec_comes_back_as_input_errors_with_located_messages_and_registers_nothing(served):
    eng, stub, program_dir, plug = served
    with pytest.raises(grpc.RpcError) as raised:
        construct(stub, eng, "dev", {"specYaml": BAD_SPEC}, {})
    error = raised.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert input_errors(error) == [(
        "specYaml:9:23",
        "specYaml:9:23: $.templates.python.network.egress: 'allow-some' is not allowed; use one of 'deny-all', "
        "'allow-list', 'allow-all'")]
    assert "Traceback" not in error.details() and 'File "' not in error.details()
    assert "specYaml is not a valid sandstack spec" in error.details()
    assert eng.monitor.mocks.registrations == {}

    (program_dir / "bad.yaml").write_text(BAD_SPEC)
    with pytest.raises(grpc.RpcError) as raised:
        construct(stub, eng, "dev", {"specFile": "bad.yaml"}, {})
    assert input_errors(raised.value) == [(
        "specFile",
        "bad.yaml:9:23: $.templates.python.network.egress: 'allow-some' is not allowed; use one of 'deny-all', "
        "'allow-list', 'allow-all'")]


GIVE_ONE = ("give exactly one of 'spec' (the spec's typed values), 'specYaml' (its YAML text) and 'specFile' (a spec "
            "file's path)")


@pytest.mark.parametrize(("inputs", "message"), [
    ({}, f"{GIVE_ONE}; got neither"),
    ({"specYaml": BAD_SPEC, "specFile": "x.yaml"}, f"{GIVE_ONE}; got 'specYaml' and 'specFile'"),
    ({"spec": {"version": 1}, "specFile": "x.yaml"}, f"{GIVE_ONE}; got 'spec' and 'specFile'"),
])
def test_the_spec_is_given_once(served, inputs: dict, message: str):
    eng, stub, _, _ = served
    with pytest.raises(grpc.RpcError) as raised:
        construct(stub, eng, "dev", inputs, {})
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details() == message


def test_a_name_children_could_collide_under_is_an_input_error(served):
    eng, stub, _, _ = served
    request_name = "my-sandboxes"
    mocks = eng.record(PROJECT, "dev")
    struct = struct_pb2.Struct()
    struct.update({"specYaml": BAD_SPEC})
    with pytest.raises(grpc.RpcError) as raised:
        stub.Construct(provider_pb2.ConstructRequest(project=PROJECT, stack="dev", monitorEndpoint=eng.address,
                                                     type=TOKEN, name=request_name, parent=stack_urn("dev"),
                                                     inputs=struct), timeout=60)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details() == (
        "SandboxStack name 'my-sandboxes' is not allowed: use letters, digits and '_', starting with a letter (no "
        "'-': children are named '<name>-<host>', and spec names hold '-')")
    assert mocks.registrations == {}


# The typed spec: the same spec as typed values (Pulumi's names), as `pulumi package add`'s SDKs send it.

def typed(spec: Path) -> dict:
    return spec_types().from_spec(yaml.safe_load(spec.read_text()))


def output_value(value=None, dependencies=(), secret=False) -> dict:
    """An input that is another resource's output, as the engine sends it (no `value`: unknown in a preview)."""
    wire = {rpc._special_sig_key: rpc._special_output_value_sig, "dependencies": list(dependencies)}
    if value is not None:
        wire["value"] = value
    if secret:
        wire["secret"] = True
    return wire


def staged(program_dir: Path, spec: Path) -> None:
    """What the spec's relative paths name (snapshot files, data), beside the program, as a consumer has them."""
    for extra in spec.parent.iterdir():
        if extra.is_dir() and not (program_dir / extra.name).exists():
            shutil.copytree(extra, program_dir / extra.name)


IMAGE = "urn:pulumi:dev::sandstack::docker:index/remoteImage:RemoteImage::base"
ADDRESS = "urn:pulumi:dev::sandstack::docker:index/container:Container::api"


def containers_of(mocks: RecordingMocks, pool: str) -> list:
    return [r for r in mocks.by_type("docker:index/container:Container") if f"-{pool}." in r.name]
