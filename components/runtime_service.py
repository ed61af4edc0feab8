"""RuntimeService: the host's sandbox runtime (sandstack.runtime), through which agent platforms claim the
declared pools' sandboxes per session, run commands, move files, snapshot, pause and release them.

It runs in the host's network namespace: the guard's rules already drop every new connection from a sandbox
bridge to the host, so no sandbox of any egress mode can reach it. Besides the guard it is the only sandstack
container with the Docker socket, which it needs for exec, archives, pause and restart; it never creates a
sandbox (a reset empties disk workspaces with a throwaway container, docs/design/runtime.md). Its plan is
sandstack/plan/runtime_host.py.
"""

from __future__ import annotations

import pulumi

from sandstack.components.register import Planned
from sandstack.plan import types


class RuntimeService(Planned):
    TYPE = types.RUNTIME_SERVICE
    container_name: pulumi.Output[str]

    def planned_outputs(self) -> dict:
        self.state, self.container = self.part("-state"), self.part("-container")
        self.container_name = self.container.name
        return {"container_name": self.container_name, "state_volume": self.state.name}
