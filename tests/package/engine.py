"""What Pulumi's engine does for a plugin, without the CLI: start the plugin as a process that prints its port, and
serve the engine's side (a resource monitor that records every registration and answers as Pulumi's mocks do,
and the engine's log service) over gRPC on this machine's loopback.

The monitor is `testbed.provider.mocks.HarnessMonitor` (Pulumi's `MockMonitor`, which tells the recording mocks
each URN) behind a gRPC server: the provider process registers resources exactly as a program under
`run_program` does in-process, so the two sets of registrations compare one to one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from google.protobuf import empty_pb2
from pulumi.runtime.proto import engine_pb2, engine_pb2_grpc, resource_pb2, resource_pb2_grpc

from testbed.provider.mocks import HarnessMonitor, RecordingMocks

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "package"
LOOPBACK = "127.0.0.1"


class _Monitor(HarnessMonitor):
    """HarnessMonitor with the project and stack of the deployment it serves (Pulumi's takes them from this
    process's own settings, which a gRPC server thread does not have)."""

    def __init__(self, mocks: RecordingMocks, project: str, stack: str):
        super().__init__(mocks)
        self.project, self.stack = project, stack

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        if parent:
            type_ = parent.split("::")[2].split("$").pop() + "$" + type_
        return f"urn:pulumi:{self.stack}::{self.project}::{type_}::{name}"


class _MonitorServicer(resource_pb2_grpc.ResourceMonitorServicer):
    def __init__(self, monitor: _Monitor):
        self.monitor = monitor

    def SupportsFeature(self, request, context):
        # MockMonitor answers with a plain object; on the wire it is the protocol's message.
        return resource_pb2.SupportsFeatureResponse(hasSupport=self.monitor.SupportsFeature(request).hasSupport)


for _method in ("GetDeploymentInfo", "Invoke", "ReadResource", "RegisterResource", "RegisterResourceOutputs",
                "RegisterStackTransform", "RegisterStackInvokeTransform", "RegisterResourceHook",
                "RegisterErrorHook", "RegisterPackage", "SignalAndWaitForShutdown"):
    setattr(_MonitorServicer, _method,
            lambda self, request, context, _name=_method: getattr(self.monitor, _name)(request))


@dataclass
class _EngineServicer(engine_pb2_grpc.EngineServicer):
    logs: list[tuple[int, str]] = field(default_factory=list)
    root: str = ""

    def Log(self, request, context):
        self.logs.append((request.severity, request.message))
        return empty_pb2.Empty()

    def GetRootResource(self, request, context):
        return engine_pb2.GetRootResourceResponse(urn=self.root)

    def SetRootResource(self, request, context):
        self.root = request.urn
        return engine_pb2.SetRootResourceResponse()


@dataclass
class Engine:
    address: str
    monitor: _Monitor
    logs: list[tuple[int, str]]

    def record(self, project: str, stack: str) -> RecordingMocks:
        """Fresh RecordingMocks for the next deployment of `project`/`stack` (the plugin process stays up)."""
        self.monitor.mocks = RecordingMocks()
        self.monitor.project, self.monitor.stack = project, stack
        self.logs.clear()
        return self.monitor.mocks


@contextmanager
def engine() -> Iterator[Engine]:
    """The engine's gRPC services (resource monitor and log) on a free loopback port."""
    monitor = _Monitor(RecordingMocks(), "", "")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    resource_pb2_grpc.add_ResourceMonitorServicer_to_server(_MonitorServicer(monitor), server)
    log = _EngineServicer()
    engine_pb2_grpc.add_EngineServicer_to_server(log, server)
    port = server.add_insecure_port(f"{LOOPBACK}:0")
    server.start()
    try:
        yield Engine(f"{LOOPBACK}:{port}", monitor, log.logs)
    finally:
        server.stop(grace=None)


@dataclass
class Plugin:
    process: subprocess.Popen
    address: str
    stderr: list[str]


@contextmanager
def plugin(engine_address: str, cwd: Path, timeout: float = 60) -> Iterator[Plugin]:
    """The plugin as Pulumi's Python language host runs it (`python <plugin folder> ENGINE`, in the program's
    directory); yields once it has printed its port. The process is killed on exit."""
    process = subprocess.Popen([sys.executable, str(PLUGIN), engine_address], cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    stderr: list[str] = []
    reader = threading.Thread(target=lambda: stderr.extend(process.stderr), daemon=True)
    reader.start()
    try:
        port: list[str] = []
        waiter = threading.Thread(target=lambda: port.append(process.stdout.readline()), daemon=True)
        waiter.start()
        waiter.join(timeout)
        line = port[0].strip() if port else ""
        assert line.isdigit(), f"the plugin printed {line!r} instead of its port; stderr:\n{''.join(stderr)}"
        yield Plugin(process, f"{LOOPBACK}:{line}", stderr)
    finally:
        process.kill()
        process.wait(timeout=30)
        reader.join(timeout=5)
