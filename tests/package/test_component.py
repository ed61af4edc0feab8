"""The package's SandboxStack arguments, in-process: the spec is given once, as plain text or a path, and every
problem is a Pulumi input error naming the input (the gRPC tests show how they reach the engine)."""

from __future__ import annotations

import pulumi
import pytest

from sandstack.package.component import load_args
from testbed.provider.mocks import RecordingMocks, run_program
from testbed.specs import STACKS


def test_an_output_where_a_plain_spec_belongs_is_an_input_error_naming_the_input():
    # In a program's run (an Output needs its event loop): the component is built there too.
    with pytest.raises(pulumi.InputPropertyError) as refused:
        run_program(lambda: load_args({"spec_file": str(STACKS / "dev.yaml"),
                                       "source_dir": pulumi.Output.from_input("x")}), RecordingMocks())
    assert (refused.value.property_path, refused.value.reason) == (
        "sourceDir", "must be a plain string known before deployment (the spec decides which resources exist)")


def test_a_missing_spec_file_is_an_input_error_on_spec_file_with_the_validate_line(tmp_path):
    missing = tmp_path / "nowhere.yaml"
    with pytest.raises(pulumi.InputPropertiesError) as refused:
        load_args({"spec_file": str(missing)})
    assert refused.value.message == "specFile is not a valid sandstack spec"
    assert refused.value.errors == [{"property_path": "specFile", "reason": f"{missing}:1:1: $: no such file"}]


def test_the_spec_file_and_the_spec_text_resolve_alike():
    path = STACKS / "dev.yaml"
    from_file = load_args({"spec_file": str(path)})
    from_text = load_args({"spec_yaml": path.read_text(), "source_dir": str(STACKS)})
    assert (from_file.templates, from_file.pools) == (from_text.templates, from_text.pools)


BAD = "version: 1\nhosts: {}\n"


def test_the_provider_lets_input_errors_through_where_pulumis_stock_one_wraps_them_for_a_traceback():
    # Why sandstack's provider subclasses ComponentProvider instead of calling component_provider_host: the stock
    # provider wraps the input error in ComponentInitError, which its server prints with the Python traceback.
    from pulumi.provider.experimental.component import ComponentProvider
    from pulumi.provider.server import ComponentInitError

    from sandstack.package.component import SandboxStack
    from sandstack.package.provider import SandstackProvider

    with pytest.raises(ComponentInitError) as wrapped:
        ComponentProvider([SandboxStack], "sandstack").construct("agents", "sandstack:index:SandboxStack",
                                                                 {"specYaml": BAD})
    assert isinstance(wrapped.value.inner, pulumi.InputPropertiesError)
    with pytest.raises(pulumi.InputPropertiesError) as refused:
        SandstackProvider().construct("agents", "sandstack:index:SandboxStack", {"specYaml": BAD})
    assert refused.value.message == "specYaml is not a valid sandstack spec"
    assert refused.value.errors == [
        {"property_path": "specYaml:1:1",
         "reason": "specYaml:1:1: $: missing required field 'templates' (sandbox templates by name)"},
        {"property_path": "specYaml:2:8", "reason": "specYaml:2:8: $.hosts: has 0 entries; at least 1 required"}]
