"""Component-suite helpers: a spec (testbed.specs) built under recording mocks, and its registrations.

    stack = Built.from_spec(tmp_path, spec(templates={"t": {...}}))
    stack.container("sandstack-t.local-0").inputs["user"]  # wire (camelCase) inputs as the mocks recorded them

Every spec goes through `load_stack` (the loader `pulumi up` uses), so what is built is what validates.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


from testbed.specs import STACK, stack_program, write_spec
from testbed.provider.mocks import ProgramResult, RecordingMocks, Registration, run_program

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"
CONTAINER = "docker:index/container:Container"
NETWORK = "docker:index/network:Network"
VOLUME = "docker:index/volume:Volume"
REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"


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


def role_config(built: "Built", role: str, host: str = "local") -> dict[str, str]:
    """A host role's configuration, as its reload container delivers it (sandstack/plan/reload.py): item → text."""
    return env_map(built.container(f"sandstack-{host}-{role}-reload"))


def gateway_networks(built: "Built", host: str = "local") -> list[dict[str, Any]]:
    """Every network the gateway is on: its own (its container's inputs) and the pool networks its reload container
    joins it to, in the wire's shape of `networks_advanced`."""
    own = built.container(f"sandstack-{host}-gateway-container").inputs["networksAdvanced"]
    joins = [line.split() for line in role_config(built, "gateway", host).get("SANDSTACK_CONFIG_JOIN", "").split("\n")
             if line.strip()]
    return own + [{"name": name, "aliases": aliases, "ipv4Address": address} for name, address, *aliases in joins]
