"""The Python client of sandstack's sandbox runtime, built from a stack's outputs; sync (`Client`) and async
(`AsyncClient`) with the same methods.

    with Client.from_outputs(outputs) as client:   # {"hosts": {host: {"url", "token"}}, "pools": {pool: [host]}}
        with client.claim("python", session="chat-42") as sandbox:     # released at the end of the block
            result = sandbox.exec(["python3", "-c", "print(6 * 7)"])   # ExecResult: result.stdout, .exit_code
            server = sandbox.start(["python3", "-m", "http.server"])   # at once: a Process handle
            for event in sandbox.start(["make"]):                      # its output as it is written
                print(event.text, end="")
            server.kill()

A claim goes to one of the pool's hosts (the same one first for the same session id) and fails over to the
next when a host does not answer or has no capacity; every other call goes to the host that holds the sandbox.
Each host's calls are retried (sandstack.client.retry) before that. Errors are typed (sandstack.client.errors).
The client is written once, async; the sync classes are made from the async ones (sandstack.client.blocking,
docs/design/client.md).
"""

from sandstack.client.async_client import AsyncClient, AsyncHostClient, AsyncSandbox
from sandstack.client.client import Client, HostClient, HostEndpoint, Sandbox, SnapshotRef
from sandstack.client.errors import (
    CommandFailed,
    Conflict,
    Forbidden,
    HostUnavailable,
    InvalidRequest,
    NoCapacity,
    NoSpace,
    NotFound,
    SandstackError,
    Timeout,
    TooLarge,
    Unauthorized,
    Unavailable,
)
from sandstack.client.process import AsyncProcess, Process
from sandstack.client.results import ExecResult, FileEntry, NetworkProfile, OutputEvent, ProcessInfo, SandboxInfo
from sandstack.client.retry import Retry

__all__ = ["AsyncClient", "AsyncHostClient", "AsyncProcess", "AsyncSandbox", "Client", "CommandFailed", "Conflict",
           "ExecResult", "FileEntry", "Forbidden", "HostClient", "HostEndpoint", "HostUnavailable", "InvalidRequest",
           "NoCapacity", "NoSpace", "NotFound", "OutputEvent", "Process", "ProcessInfo", "Retry", "Sandbox",
           "NetworkProfile", "SandboxInfo", "SandstackError", "SnapshotRef", "Timeout", "TooLarge", "Unauthorized", "Unavailable"]
