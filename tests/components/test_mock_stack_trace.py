"""The mocks' stack traces (testbed/provider/stack_trace.py) are Pulumi's own, computed without reading source lines:
the same message from the same frame, and the one a program run under the mocks registers with."""

from __future__ import annotations

import pulumi
from pulumi.runtime import resource

from testbed.provider import stack_trace
from testbed.provider.mocks import RecordingMocks, run_program


class _Resource:  # Pulumi counts three `__init__` frames (Resource, Custom/ComponentResource, the concrete class)
    def __init__(self):
        self.traces = (stack_trace.PULUMIS(), stack_trace.stack_trace())


class _Custom(_Resource):
    def __init__(self):
        super().__init__()


class _Concrete(_Custom):
    def __init__(self):
        super().__init__()


def _made_here():
    return _Concrete().traces


def test_the_trace_is_pulumis_from_the_same_frame():
    pulumis, ours = _made_here()
    assert ours == pulumis
    uris = [frame.pc.uri for frame in ours.frames]
    assert uris[0] == f"file://{__file__}" and ours.frames[0].pc.line > 0  # innermost first: _made_here
    assert len(ours.frames) > 10  # and every frame below it, down to pytest's own


def test_fewer_than_three_constructors_give_pulumis_empty_trace():
    pulumis, ours = _Resource().traces
    assert ours == pulumis == resource.source_pb2.StackTrace()


def test_a_frame_without_a_file_path_has_no_position_as_in_pulumi():
    # `exec` of compiled text: the frames' file name is "<made>", which is not an absolute path.
    scope: dict = {"_Concrete": _Concrete}
    exec(compile("traces = _Concrete().traces", "<made>", "exec"), scope)
    pulumis, ours = scope["traces"]
    assert ours == pulumis and not ours.frames[0].HasField("pc")


def test_a_program_under_the_mocks_registers_with_it():
    seen = []

    def program():
        seen.append(resource._get_stack_trace)
        pulumi.ComponentResource("sandstack:test:Thing", "thing")

    mocks = RecordingMocks()
    run_program(program, mocks)
    assert seen == [stack_trace.stack_trace] and len(mocks.registrations) == 1
