"""Disk workspaces, as plain values: one Docker volume per sandbox and disk path, which the daemon mounts from a
loop device the host guard attaches to a filesystem image of exactly the declared size (docs/design/workspaces.md).

The volume's name carries everything that makes a different filesystem (size, exec, seeding), so changing one
makes a new volume and the sandbox moves onto it; the renewed guard drops the old one's image.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandstack.plan.contract import workspace_dir
from sandstack.spec.resolve import ResolvedTemplate
from sandstack.spec.units import MIB



@dataclass(frozen=True)
class WorkspaceVolume:
    name: str  # Docker volume name
    stack: str
    sandbox: str  # the sandbox container that mounts it
    path: str  # where the sandbox sees it
    size: int  # bytes, whole MiB
    exec: bool
    seed: bool  # the guard leaves the new filesystem empty, so Docker copies the image's content at `path` in

    @property
    def driver_opts(self) -> dict[str, str]:
        """The local driver mounts the guard's loop device; nodev and nosuid always, noexec unless asked."""
        options = "nodev,nosuid" + ("" if self.exec else ",noexec")
        return {"type": "ext4", "device": f"{workspace_dir(self.stack)}/{self.name}.dev", "o": options}

    @property
    def guard_line(self) -> str:
        return f"{self.name} {self.size} {'seed' if self.seed else 'empty'}"


def plan_workspaces(stack: str, sandbox: str, template: ResolvedTemplate) -> tuple[WorkspaceVolume, ...]:
    out = []
    for k, w in enumerate(x for x in template.writable if x.type == "disk"):
        flags = ("x" if w.exec else "") + ("s" if w.seed else "")
        out.append(WorkspaceVolume(f"{sandbox}-ws{k}-{w.size // MIB}m{flags}", stack, sandbox, w.path, w.size,
                                   w.exec, w.seed))
    return tuple(out)
