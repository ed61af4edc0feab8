"""The door every use of a bound sandbox goes through (exec, processes, terminals, files, snapshots): the sandbox
bound and running, brought back first when its session's idle policy hibernated or paused it, refused (409)
when it is paused by a request or not bound; each use restarts the idle clock."""

from __future__ import annotations

from sandstack.runtime.errors import conflict
from sandstack.runtime.interfaces import Hibernation, Sandboxes
from sandstack.runtime.store import SandboxRow


class Access:
    def __init__(self, sandboxes: Sandboxes, hibernation: Hibernation):
        self.sandboxes, self.hibernation = sandboxes, hibernation

    def usable(self, name: str) -> SandboxRow:
        """The sandbox, bound and running, for exec and files; resumes one the idle policy paused."""
        sandboxes = self.sandboxes
        row = sandboxes.get(name)
        if row.status == "hibernated":  # the session's next use brings it back
            row = self.hibernation.resume(name)
        if row.status == "paused" and row.paused_by == "idle":
            with sandboxes.transition(name):
                sandboxes.backend.unpause(name)
                sandboxes.store.update(name, status="bound", paused_by=None)
            row = sandboxes.get(name)
        if row.status == "paused":
            raise conflict(f"sandbox {name!r} is paused; resume it first (POST /v1/sandboxes/{name}/resume)",
                           sandbox=name, status="paused")
        if row.status != "bound":
            raise conflict(f"sandbox {name!r} is {row.status}, not bound to a session; claim one with "
                           "POST /v1/sessions", sandbox=name, status=row.status)
        sandboxes.store.touch(name)
        return row
