"""The typed `spec` input as the engine sends it to Construct, made plain before planning.

The engine sends a value that came from another resource (an image digest, a host's address) as an output value:
known or, in a preview, unknown; secret or not; with the resources it depends on. `resolve` waits for each of them
and keeps what the plan needs to honour them: which values are unknown, and which texts came from which resources
and were secret (`Carried`: every input holding such a text depends on those resources, and is secret where the
text was). `plannable` is what a preview with unknown values can still plan: the spec without the hosts,
templates and pools an unknown value is in (and what depends on them).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.output import Unknown

from sandstack.components.sandbox_stack import Carried

Path = tuple[str | int, ...]
UNKNOWN = Unknown()  # what an unknown value is, in resolved data
SECTIONS = ("hosts", "templates", "pools")  # what a preview can leave out one entry at a time


@dataclass
class Resolved:
    data: Any  # the typed value, plain: Pulumi's names, UNKNOWN where a value is not known yet
    unknown: list[Path] = field(default_factory=list)
    secret: list[Path] = field(default_factory=list)
    carried: list[Carried] = field(default_factory=list)


def has_outputs(value: Any) -> bool:
    """Whether a value holds an output or an unknown anywhere (else it is plain data, ready to validate)."""
    if isinstance(value, (pulumi.Output, Unknown)):
        return True
    if isinstance(value, dict):
        return any(has_outputs(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(has_outputs(v) for v in value)
    return False


async def resolve(value: Any) -> Resolved:
    """The value with every output in it waited for (see the module's docstring)."""
    out = Resolved(None)

    async def walk(node: Any, path: Path, secret: bool, resources: tuple) -> Any:
        if isinstance(node, pulumi.Output):
            secret = secret or await node.is_secret()
            resources = resources + tuple(await node.resources())
            known = await node.is_known()
            inner = await node.future(with_unknowns=True)
            if not known and inner is None:
                inner = UNKNOWN
            return await walk(inner, path, secret, resources)
        if isinstance(node, Unknown):
            out.unknown.append(path)
            return UNKNOWN
        if isinstance(node, dict):
            return {k: await walk(v, path + (k,), secret, resources) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return [await walk(v, path + (i,), secret, resources) for i, v in enumerate(node)]
        if secret:
            out.secret.append(path)
        if isinstance(node, str) and (secret or resources):
            out.carried.append(Carried(node, tuple(resources), secret))
        return node

    out.data = await walk(value, (), False, ())
    return out


def show(path: Path, prefix: str = "spec") -> str:
    """('templates', 'python', 'baseImage') → spec.templates.python.baseImage."""
    out = prefix
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", part):
            out += f".{part}"
        else:
            out += f"[{json.dumps(part)}]"
    return out


def plannable(data: dict, unknown: list[Path]) -> tuple[dict | None, dict[str, list[str]]]:
    """The typed spec without the hosts, templates and pools an unknown value is in, the templates extending a
    left-out one, and the pools on a left-out template or left with no host; and what was left out, by section.
    None when an unknown value is elsewhere (`defaults`, `profiles`, `policy`: every template may depend on it)."""
    out: dict[str, set[str]] = {section: set() for section in SECTIONS}
    for path in unknown:
        if len(path) < 2 or path[0] not in SECTIONS:
            return None, {}
        out[str(path[0])].add(str(path[1]))
    templates = data.get("templates") or {}
    grown = True
    while grown:
        extending = {n for n, t in templates.items() if isinstance(t, dict) and t.get("extends") in out["templates"]}
        grown = not extending <= out["templates"]
        out["templates"] |= extending
    pools = {}
    for name, pool in (data.get("pools") or {}).items():
        hosts = [h for h in pool.get("hosts", []) if h not in out["hosts"]]
        if name in out["pools"] or pool.get("template") in out["templates"] or not hosts:
            out["pools"].add(name)
            continue
        pools[name] = {**pool, "hosts": hosts}
    reduced = {**data, "pools": pools,
               "hosts": {k: v for k, v in (data.get("hosts") or {}).items() if k not in out["hosts"]},
               "templates": {k: v for k, v in templates.items() if k not in out["templates"]}}
    left_out = {section: sorted(names) for section, names in out.items() if names}
    if not reduced["hosts"] or not reduced["templates"]:
        return None, left_out
    return reduced, left_out
