"""Pulumi's per-registration stack trace, computed the same but cheaply, for programs run under the test mocks.

`pulumi.runtime.resource.register_resource` records, for every resource, the frames below the resource's constructors
(the `stackTrace` and `sourcePosition` of its RegisterResourceRequest). Pulumi builds them with
`traceback.extract_stack()`, which reads every frame's source line through linecache, then turns each frame's file
name into a URI with pathlib. Under pytest the stack holds ~60 frames (pytest, pluggy, the harness, asyncio), so this
was about a quarter of a change-matrix run (cProfile: 128 s of 508 s over 441 runs), for lines nobody reads.

`stack_trace` returns the very same message (the test holds it against Pulumi's own function): it walks the frames
without reading source lines, and converts each file name once per process. `install` puts it in Pulumi's place;
testbed/provider/mocks.py does so with the mocks. The benchmarks do not use these mocks, so they still measure
Pulumi's own cost.
"""

from __future__ import annotations

import functools
import pathlib
import sys

from pulumi.runtime import resource
from pulumi.runtime.proto import source_pb2

PULUMIS = resource._get_stack_trace


@functools.lru_cache(maxsize=None)
def _uri(filename: str) -> str | None:
    # As pulumi's _get_source_position_for_frame: no position for a frame without a file, or one whose name is
    # not an absolute path ("<frozen runpy>": as_uri raises).
    if filename == "":
        return None
    try:
        return pathlib.Path(filename).as_uri()
    except BaseException:  # noqa: BLE001 -- Pulumi's own catch
        return None


def stack_trace() -> source_pb2.StackTrace:
    """What `pulumi.runtime.resource._get_stack_trace()` returns when called from the same frame."""
    # Pulumi's: the frames older than the third `__init__` frame counted from the caller (Resource, then
    # Custom/ComponentResource, then the concrete class), innermost first; none when there are fewer than three or the
    # third is the outermost frame.
    frame = sys._getframe(1)
    inits = 0
    while frame is not None:
        if frame.f_code.co_name == "__init__":
            inits += 1
            if inits == 3:
                break
        frame = frame.f_back
    if frame is None or frame.f_back is None:
        return source_pb2.StackTrace()
    frames = []
    frame = frame.f_back
    while frame is not None:
        uri, line = _uri(frame.f_code.co_filename), frame.f_lineno
        position = None if uri is None or line is None else source_pb2.SourcePosition(uri=uri, line=line)
        frames.append(source_pb2.StackFrame(pc=position))
        frame = frame.f_back
    return source_pb2.StackTrace(frames=frames)


def install() -> None:
    resource._get_stack_trace = stack_trace
