"""The spec builders of every suite: small stack specs as dicts, written as YAML next to their files.

    data = spec({"t": {"base_image": "busybox:1.36"}})       # one roomy local host, one pool per template
    path = write_spec(tmp_path, changed(data, "templates.t.user", "0:0"))
    program = stack_program(path)                            # the Pulumi program `pulumi up` would run

Every spec goes through `load_stack` (the loader `pulumi up` uses), so what is built is what validates.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from sandstack.program import program
from sandstack.spec import load_stack

REPO = Path(__file__).resolve().parents[1]
STACKS = REPO / "stacks"  # the committed stack specs
STACK = "t"  # the stack name of every small spec: Docker names are `sandstack-t-...`
LOCAL = "unix:///var/run/docker.sock"
SCHEMA_COMMENT = "# yaml-language-server: $schema=../schemas/stack.schema.json\n"


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
    out.update({k: v for k, v in extra.items() if v})
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


def set_path(data: dict, path: str, value: Any) -> None:
    """Sets a dotted path in place ('templates.agent.ports.0.port': list items by index); None removes the key."""
    node: Any = data
    *parents, last = path.split(".")
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if isinstance(node, list):
        node[int(last)] = value
    elif value is None:
        node.pop(last, None)
    else:
        node[last] = value


def spec_text(data: dict) -> str:
    return SCHEMA_COMMENT + yaml.safe_dump(data, sort_keys=False)


def write_spec(folder: Path, data: dict, files: dict[str, str] | None = None, *, lock: bool = False) -> Path:
    """`folder/stack.yaml` with `files` beside it; with `lock`, its address lock too, as `sandstack lock` writes it
    for a committed stack (none for a spec that does not validate)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in (files or {}).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(content)
    path = folder / "stack.yaml"
    path.write_text(spec_text(data))
    if lock:
        from sandstack.tooling.lock import lock_file

        lock_file(str(path), STACK, check=False)
    return path


def stack_program(path: Path, stack: str = STACK, build_root: Path | None = None):
    """The Pulumi program of `path`, `sandstack.program.program` with its outputs (`pulumi up` runs the same).
    The spec is loaded first, so an invalid one raises SpecError with its diagnostics for the test to read."""
    def run() -> None:
        program(load_stack(path), stack=stack, build_root=build_root or path.parent / "build")
    return run


def secret_keys(node: object) -> set[str]:
    """Every `{secret: key}` reference in a loaded spec's data (env values, TLS material, secret files)."""
    if isinstance(node, dict):
        found = {node["secret"]} if isinstance(node.get("secret"), str) else set()
        return found.union(*(secret_keys(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(secret_keys(v) for v in node))
    return set()


# The secrets stacks/dev.yaml names (its runtime's token), as tests pass them to the program.
DEV_SECRETS = {"runtimeToken": "dev-runtime-token-for-tests-000000"}
