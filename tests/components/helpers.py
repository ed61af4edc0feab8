"""Component-suite helpers: small specs written as YAML next to their files, built under recording mocks.

    stack = Built.from_spec(tmp_path, spec(templates={"t": {...}}))
    stack.container("sandstack-t.local-0").inputs["user"]  # wire (camelCase) inputs as the mocks recorded them

Every spec goes through `load_stack` (the loader `pulumi up` uses), so what is built is what validates.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import yaml

from sandstack.program import build_stack
from sandstack.spec import load_stack
from tests.support.recording_mocks import ProgramResult, RecordingMocks, Registration, run_program

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"
STACK = "t"  # the stack name of every small spec: Docker names are `sandstack-t-...`
LOCAL = "unix:///var/run/docker.sock"
CONTAINER = "docker:index/container:Container"
NETWORK = "docker:index/network:Network"
VOLUME = "docker:index/volume:Volume"
REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"


def host(endpoint: str = LOCAL, **extra: Any) -> dict:
    return {"endpoint": endpoint, "capacity": {"cpus": 64, "memory": "256GiB", "disk": "1TiB"}, **extra}


def spec(templates: dict, pools: dict | None = None, hosts: dict | None = None, **extra: Any) -> dict:
    """A stack with one roomy local host; `pools` defaults to one replica of each template there."""
    out = {
        "version": 1,
        "hosts": hosts or {"local": host()},
        "templates": templates,
        "pools": pools if pools is not None else {n: {"template": n, "hosts": ["local"]} for n in templates},
    }
    out.update(extra)
    return out


def changed(data: dict, path: str, value: Any) -> dict:
    """A deep copy of `data` with the dotted `path` set to `value` (one field changed)."""
    out = copy.deepcopy(data)
    node = out
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return out


def write_spec(folder: Path, data: dict, files: dict[str, str] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in (files or {}).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(content)
    path = folder / "stack.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def stack_program(path: Path, stack: str = STACK, build_root: Path | None = None):
    """The Pulumi program of `path`: load it, build a SandboxStack, export its sandboxes."""
    def program() -> None:
        built = build_stack(load_stack(path), stack=stack, build_root=build_root or path.parent / "build")
        pulumi.export("sandboxes", built.sandboxes)
    return program


@dataclass
class Built:
    mocks: RecordingMocks
    result: ProgramResult

    @classmethod
    def from_path(cls, path: Path, *, stack: str = STACK, secret_config: dict | None = None,
                  mocks: RecordingMocks | None = None, build_root: Path | None = None) -> "Built":
        mocks = mocks or RecordingMocks()
        result = run_program(stack_program(path, stack, build_root), mocks, stack=stack,
                             secret_config=secret_config)
        return cls(mocks, result)

    @classmethod
    def from_spec(cls, folder: Path, data: dict, files: dict[str, str] | None = None, **kwargs: Any) -> "Built":
        return cls.from_path(write_spec(folder, data, files), **kwargs)

    # -- queries
    def reg(self, name: str) -> Registration:
        return self.mocks.by_name(name)

    def container(self, name: str) -> Registration:
        reg = self.reg(name)
        assert reg.typ == CONTAINER, f"{reg.urn} is a {reg.typ}"
        return reg

    def names(self, typ: str) -> list[str]:
        return sorted(r.name for r in self.mocks.by_type(typ))

    def outputs_of(self, component_name: str) -> dict:
        """What a component passed to register_outputs (recorded by the mocks), by logical name."""
        found = [out for urn, out in self.mocks.component_outputs.items() if urn.endswith(f"::{component_name}")]
        assert len(found) == 1, f"{len(found)} components named {component_name!r}"
        return found[0]

    @property
    def sandboxes(self) -> list[dict]:
        return self.result.outputs["sandboxes"]


def label_map(reg: Registration) -> dict[str, str]:
    """`labels` of a Container/Network/Volume (a list of {label, value}) as a mapping."""
    return {item["label"]: item["value"] for item in reg.inputs["labels"]}


def env_map(reg: Registration) -> dict[str, str]:
    return dict(e.split("=", 1) for e in reg.inputs["envs"])
