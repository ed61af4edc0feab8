"""Deploying a sandstack spec to the local daemon through the engine harness, as `pulumi up` would.

`engine_spec(...)` writes a spec that uses only the locally built test images (nothing is pulled) and
`Deployment.up()` runs the real Pulumi program (`SandboxStack` from that spec) under the harness.
"""

from __future__ import annotations

import itertools
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import docker as docker_sdk
import pulumi
import yaml

from components.sandbox_stack import SandboxStack, SandboxStackArgs
from sandstack.spec import load_stack

_COUNTER = itertools.count()
_SLOTS = itertools.count()


def unique_stack() -> str:
    """A short stack name per deployment: Docker names and bridge names derive from it."""
    return f"e{next(_COUNTER)}x{__import__('os').getpid() % 1000}"


def engine_spec(infra_image: str, templates: dict, pools: dict | None = None, *, capacity: dict | None = None,
                profiles: dict | None = None, defaults: dict | None = None) -> str:
    """A stack spec on the local daemon. `pools` defaults to one replica of each template. `Deployment`
    gives the host its own `subnet_pool`."""
    spec = {
        "version": 1,
        "hosts": {
            "local": {
                "endpoint": "unix:///var/run/docker.sock",
                "capacity": capacity or {"cpus": 2, "memory": "8GiB", "disk": "20GiB"},
                "overcommit": {"cpus": 8, "memory": 2},
                "infra_image": infra_image,
            }
        },
        "templates": templates,
        "pools": pools if pools is not None else {name: {"template": name, "hosts": ["local"]} for name in templates},
    }
    if profiles:
        spec["profiles"] = profiles
    if defaults:
        spec["defaults"] = defaults
    return "# yaml-language-server: $schema=../schemas/stack.schema.json\n" + yaml.safe_dump(spec, sort_keys=False)


@dataclass
class Deployment:
    """One stack on the local daemon: write its spec, `up()` it (again), read its sandboxes."""

    harness: object
    workdir: Path
    stack: str = field(default_factory=unique_stack)
    secret_config: dict = field(default_factory=dict)
    slot: int = field(default_factory=lambda: next(_SLOTS))

    @property
    def spec_path(self) -> Path:
        return self.workdir / "stack.yaml"

    @property
    def subnet_pool(self) -> str:
        """This deployment's own /16 (10.200-249.0.0): stacks alive at the same time never overlap, and
        every apply of one deployment uses the same one (so its networks are not replaced)."""
        return f"10.{200 + self.slot % 50}.0.0/16"

    def write(self, spec_text: str, files: dict[str, str] | None = None) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        data = yaml.safe_load(spec_text)
        for host in (data.get("hosts") or {}).values():
            if isinstance(host, dict) and host.get("endpoint", "").startswith("unix://"):
                host.setdefault("subnet_pool", self.subnet_pool)
        header = "# yaml-language-server: $schema=../schemas/stack.schema.json\n"
        self.spec_path.write_text(header + yaml.safe_dump(data, sort_keys=False))
        for name, content in (files or {}).items():
            (self.workdir / name).parent.mkdir(parents=True, exist_ok=True)
            (self.workdir / name).write_text(content)

    def program(self):
        spec_path, stack, build_root = self.spec_path, self.stack, self.workdir / "build"

        def run() -> None:
            spec = load_stack(spec_path)
            deployed = SandboxStack("sandstack", SandboxStackArgs(spec=spec, stack=stack, build_root=build_root))
            pulumi.export("sandboxes", deployed.sandboxes)

        return run

    def up(self, spec_text: str | None = None, files: dict[str, str] | None = None, **kwargs):
        if spec_text is not None:
            self.write(spec_text, files)
        return self.harness.run(self.program(), secret_config={f"sandstack:{k}": v for k, v in
                                                               self.secret_config.items()}, **kwargs)

    def container(self, pool: str, index: int = 0) -> "docker_sdk.models.containers.Container":
        return docker_sdk.from_env().containers.get(f"sandstack-{self.stack}-{pool}-{index}")


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip()
