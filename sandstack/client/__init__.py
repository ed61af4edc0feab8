"""The Python client of sandstack's sandbox runtime, built from a stack's outputs.

    client = Client.from_outputs(outputs)          # {"hosts": {host: {"url", "token"}}, "pools": {pool: [host]}}
    sandbox = client.claim("python", session="chat-42")
    result = sandbox.exec(["python3", "-c", "print(6 * 7)"])
    sandbox.write_file("notes.txt", b"hello")
    sandbox.release()

A claim goes to one of the pool's hosts (the same one first for the same session id) and fails over to the
next when a host does not answer or has no capacity; every other call goes to the host that holds the sandbox.
"""

from sandstack.client.client import (
    Client,
    HostClient,
    HostEndpoint,
    HostUnavailable,
    NoCapacity,
    Sandbox,
    SandstackError,
    SnapshotRef,
)

__all__ = ["Client", "HostClient", "HostEndpoint", "HostUnavailable", "NoCapacity", "Sandbox", "SandstackError",
           "SnapshotRef"]
