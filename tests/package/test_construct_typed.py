"""The typed `spec` input over Pulumi's protocol, the plugin driven as tests/package/test_construct.py drives it:
Construct with the typed values of each committed stack registers what the YAML input registers, in an update and in
a preview; an output of another resource reaches the inputs that hold it (their dependencies, secret where it was);
a preview with unknown values plans the rest and says what it left out; an invalid typed spec comes back as input
errors at the program's paths, never showing a secret."""

from __future__ import annotations

import re

import grpc
import pytest
import yaml
from pulumi.output import Unknown
from pulumi.runtime import rpc

from sandstack.spec import load_stack
from sandstack.spec.credentials import HIDDEN
from testbed.provider.mocks import unwrap
from testbed.specs import STACKS, secret_keys
from tests.package.test_construct import (ADDRESS, IMAGE, TOKEN, construct, containers_of, input_errors,  # noqa: F401
                                          output_value, registrations, served, staged, typed)


@pytest.mark.parametrize("preview", [False, True], ids=["update", "preview"])
@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_construct_with_the_typed_spec_registers_what_the_yaml_input_registers(served, monkeypatch, stack: str,
                                                                             preview: bool):
    eng, stub, program_dir, _ = served
    spec = STACKS / f"{stack}.yaml"
    secrets = {key: f"value-of-{key}" for key in secret_keys(load_stack(spec).spec.model_dump())}
    staged(program_dir, spec)
    monkeypatch.chdir(program_dir)
    # Pulumi's wire carries a map's keys in name order, whatever order the program wrote them in: the typed spec is
    # the YAML spec with its keys in that order (the order decides which template names a shared snapshot image,
    # and the order of the `sandboxes` output: docs/design/package.md).
    in_wire_order = yaml.safe_dump(yaml.safe_load(spec.read_text()), sort_keys=True)
    yaml_response, from_yaml = construct(stub, eng, stack, {"specYaml": in_wire_order}, secrets, preview)
    yaml_state = unwrap(rpc.deserialize_properties(yaml_response.state, keep_unknowns=True))

    response, got = construct(stub, eng, stack, {"spec": typed(spec)}, secrets, preview)

    assert registrations(got) == registrations(from_yaml)
    assert len(got.registrations) > 10 and got.by_type("docker:index/container:Container")
    assert unwrap(rpc.deserialize_properties(response.state, keep_unknowns=True)) == yaml_state


def test_an_output_of_another_resource_reaches_the_container_inputs_that_hold_it(served, monkeypatch):
    # A TypeScript program passes an image it pulled and a service's address into the spec: each container input
    # holding the value depends on its resource, and one made from a secret is secret.
    eng, stub, program_dir, _ = served
    spec = typed(STACKS / "dev.yaml")
    staged(program_dir, STACKS / "dev.yaml")
    monkeypatch.chdir(program_dir)
    image = "busybox@sha256:" + "a" * 64
    spec["templates"]["shell"]["baseImage"] = output_value(image, [IMAGE])
    spec["templates"]["shell"]["env"] = {"API_URL": output_value("http://10.9.8.7:8080", [ADDRESS]),
                                        "API_KEY": output_value("k-3f9a1c77e2b04d5e", [ADDRESS], secret=True)}
    secrets = {"runtimeToken": "value-of-runtimeToken"}

    response, got = construct(stub, eng, "dev", {"spec": spec}, secrets)

    # The base image reaches the snapshot's build (its Dockerfile, on disk): the image resource depends on it.
    [built] = [r for r in got.registrations.values() if r.name == "agents-shell.local-image"]
    assert IMAGE in built.request.dependencies
    shell, python = containers_of(got, "shell"), containers_of(got, "python")
    assert len(shell) == 2 and python
    for container in shell:
        envs = container.inputs["envs"]
        assert {"API_URL=http://10.9.8.7:8080", "API_KEY=k-3f9a1c77e2b04d5e"} <= set(envs)
        assert ADDRESS in container.request.dependencies
        assert "envs" in container.secret_paths  # a list holding a secret goes to the engine secret whole
    for container in python:  # a template that holds none of the values
        assert not {IMAGE, ADDRESS} & set(container.request.dependencies)
        assert not container.secret_paths
        assert not any("API_" in e for e in container.inputs["envs"])
    state = unwrap(rpc.deserialize_properties(response.state, keep_unknowns=True))
    assert sorted(s["container"] for s in state["sandboxes"] if s["pool"] == "shell") == sorted(
        c.inputs["name"] for c in shell)
    assert "runtime" in state and state["runtime"]["hosts"]["local"]["url"]
    assert state["hosts"]["local"]["guard"] and "address" in state["hosts"]["local"]


def test_a_preview_with_unknown_values_plans_the_rest_and_says_what_it_left_out(served, monkeypatch):
    eng, stub, program_dir, _ = served
    spec = typed(STACKS / "dev.yaml")
    staged(program_dir, STACKS / "dev.yaml")
    monkeypatch.chdir(program_dir)
    secrets = {"runtimeToken": "value-of-runtimeToken"}
    _, whole = construct(stub, eng, "dev", {"spec": typed(STACKS / "dev.yaml")}, secrets, preview=True)
    spec["templates"]["preview"]["env"] = {"API_URL": output_value(None, [ADDRESS])}  # unknown until the update

    response, got = construct(stub, eng, "dev", {"spec": spec}, secrets, preview=True)

    # `builder` extends `preview`: both templates, and their pools, wait for the update.
    left_out = {urn for urn in whole.registrations if re.search(r"[-.](preview|builder)\b", urn)}
    assert left_out and set(got.registrations) == set(whole.registrations) - left_out
    assert containers_of(got, "shell") and containers_of(got, "python")
    assert [m for severity, m in eng.logs if "not known until the update" in m] == [
        "not known until the update: spec.templates.preview.env.API_URL. This preview plans the stack without "
        "templates builder, preview; pools builder, preview."]
    state = rpc.deserialize_properties(response.state, keep_unknowns=True)
    assert sorted(state) == ["hosts", "runtime", "sandboxes"]
    assert all(isinstance(v, Unknown) for v in state.values())


def test_an_unknown_value_every_template_may_use_leaves_the_preview_with_the_stack_alone(served, monkeypatch):
    eng, stub, program_dir, _ = served
    spec = typed(STACKS / "dev.yaml")
    spec["defaults"]["env"]["API_URL"] = output_value(None, [ADDRESS])
    monkeypatch.chdir(program_dir)
    response, got = construct(stub, eng, "dev", {"spec": spec}, {"runtimeToken": "value-of-runtimeToken"},
                              preview=True)
    assert [r.typ for r in got.registrations.values()] == [TOKEN]
    assert [m for _, m in eng.logs if "not known" in m] == [
        "not known until the update: spec.defaults.env.API_URL. This preview plans none of the stack's resources: "
        "the update plans them once the values are known."]


def test_an_invalid_typed_spec_comes_back_as_input_errors_at_its_paths_in_the_programs_names(served):
    eng, stub, _, _ = served
    spec = typed(STACKS / "dev.yaml")
    spec["templates"]["python"]["limits"] = {"profile": "medium", "memory": "lots"}
    spec["templates"]["python"]["network"]["egress"] = "allow-some"
    spec["templates"]["shell"]["baseImage"] = "Not An Image"
    with pytest.raises(grpc.RpcError) as raised:
        construct(stub, eng, "dev", {"spec": spec}, {})
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details().startswith("spec is not a valid sandstack spec")
    assert "Traceback" not in raised.value.details()
    assert input_errors(raised.value) == [
        ("spec.templates.python.limits.memory",
         "spec.templates.python.limits.memory: 'lots' is not a valid size: use an integer number of bytes or a number "
         "with a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. '512MiB'"),
        ("spec.templates.python.network.egress",
         "spec.templates.python.network.egress: 'allow-some' is not allowed; use one of 'deny-all', 'allow-list', "
         "'allow-all'"),
        ("spec.templates.shell.baseImage",
         "spec.templates.shell.baseImage: 'Not An Image' is not a valid image reference: use an image reference such "
         "as 'python:3.12-slim' or 'repo/name@sha256:<64 hex digits>'"),
    ]
    assert eng.monitor.mocks.registrations == {}


def test_a_secret_in_an_invalid_typed_spec_is_never_shown(served, monkeypatch):
    eng, stub, program_dir, _ = served
    spec = typed(STACKS / "dev.yaml")
    spec["templates"]["python"]["network"]["egress"] = output_value("hunter2-sekrit", [ADDRESS], secret=True)
    spec["templates"]["shell"]["workdir"] = "ghp_" + "x1Y2z3" * 6  # a literal that looks like a credential
    spec["templates"]["shell"]["user"] = "Root User"
    monkeypatch.chdir(program_dir)
    with pytest.raises(grpc.RpcError) as raised:
        construct(stub, eng, "dev", {"spec": spec}, {"runtimeToken": "value-of-runtimeToken"})
    errors = input_errors(raised.value)
    assert "hunter2-sekrit" not in repr(errors) and "x1Y2z3" not in repr(errors)
    # The engine prints the value at an error's path: a secret's path names none ('(value not shown)').
    assert errors == [
        ("spec.templates.python.network.egress (value not shown)",
         "spec.templates.python.network.egress: '***' is not allowed; use one of 'deny-all', 'allow-list', "
         "'allow-all'"),
        ("spec.templates.shell.user",
         "spec.templates.shell.user: 'Root User' is not a valid user: use 'uid[:gid]' or 'name[:group]', e.g. "
         "'10001:10001'"),
        ("spec.templates.shell.workdir (value not shown)",
         f"spec.templates.shell.workdir: '{HIDDEN}' is not a valid path: use an absolute path such as "
         "'/workspace', without '.' or '..' segments or spaces"),
    ]
