"""Synthetic stack specs of a requested size, written as YAML files the CLI reads.

    size = SIZES["1000"]                 # 100 templates, each pool on 10 hosts, 1 replica per host
    base, head = write_pair(size, tmp)   # head: every template's CPUs changed (a diff with work to do)

Sizes follow the issue: 10 templates × 1, 100 × 1, and 100 × 10 over 10 hosts. For 1,000 each pool spans
every host (one replica per host) rather than ten replicas on one host: per-host objects (networks, snapshot
images) then grow with the sandbox count too, which is the harder case for preview and the program.
Templates cycle through the features that make work for the tools (egress modes, ports, snapshot setup,
readiness, writable paths, env) so no code path is skipped because every template looks alike.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import yaml

SCHEMA_COMMENT = "# yaml-language-server: $schema=../schemas/stack.schema.json\n"
EGRESS = ("deny-all", "allow-list", "allow-all")


@dataclass(frozen=True)
class Size:
    """`templates` pools (one per template), each on `hosts_per_pool` of `hosts` hosts, `replicas` per host."""
    label: str
    templates: int
    hosts: int
    hosts_per_pool: int
    replicas: int

    @property
    def sandboxes(self) -> int:
        return self.templates * self.hosts_per_pool * self.replicas


SIZES = {
    "10": Size("10", templates=10, hosts=1, hosts_per_pool=1, replicas=1),
    "100": Size("100", templates=100, hosts=1, hosts_per_pool=1, replicas=1),
    "1000": Size("1000", templates=100, hosts=10, hosts_per_pool=10, replicas=1),
}


def _host(index: int, size: Size) -> dict:
    # Capacity sized so the capacity rule passes with room: every pool may land on every host.
    per_host = size.templates * size.replicas
    host = {"capacity": {"cpus": 2 * per_host, "memory": f"{4 * per_host}GiB", "disk": f"{8 * per_host}GiB"}}
    # One local host keeps the small sizes to the plain `unix://` provider; larger fleets are ssh hosts
    # (reserved example.com names: nothing ever connects to them, the tools only read the spec).
    host["endpoint"] = ("unix:///var/run/docker.sock" if size.hosts == 1
                        else f"ssh://deploy@h{index}.example.com")
    return host


def _template(index: int) -> dict:
    egress = EGRESS[index % len(EGRESS)]
    template: dict = {
        "description": f"synthetic template {index} ({egress})",
        "command": ["python3", "-m", "http.server", "8000"],
        "limits": {"cpus": 1, "memory": "1GiB", "disk": "1GiB", "pids": 256},
        "lifecycle": {"max_lifetime": "8h", "idle_timeout": "30m"},
        "env": {"TEMPLATE_INDEX": str(index)},
        "network": {"egress": egress},
        "filesystem": {"writable": [{"path": "/tmp", "size": "64MiB"}]},
    }
    if egress == "allow-list":
        template["network"]["allow"] = [f"api{j}.example.com" for j in range(5)] + ["*.example.org"]
        template["network"]["deny"] = ["bad.example.org"]
    if index % 2 == 0:  # half publish a port on the host's loopback, with a readiness probe on it
        template["ports"] = [{"port": 8000, "exposure": "host", "name": "api"}]
        template["readiness"] = {"command": ["python3", "-c", "print('ok')"], "interval": "5s"}
    if index % 4 == 0:  # a quarter build a snapshot image with a setup step
        template["snapshot"] = {"version": "1", "setup": [f"mkdir -p /workspace/t{index}"]}
    return template


def generate(size: Size) -> dict:
    """The spec of `size` as data (what the YAML file holds)."""
    hosts = {f"h{i}": _host(i, size) for i in range(size.hosts)}
    names = list(hosts)
    pools = {}
    for t in range(size.templates):
        start = t % size.hosts  # spread pools over hosts when a pool uses fewer than all of them
        placed = [names[(start + k) % size.hosts] for k in range(size.hosts_per_pool)]
        pools[f"p{t}"] = {"template": f"t{t}", "hosts": placed, "replicas": size.replicas}
    return {
        "version": 1,
        "description": f"synthetic benchmark stack: {size.sandboxes} sandboxes",
        "hosts": hosts,
        "defaults": {"base_image": "python:3.12-slim"},
        "templates": {f"t{t}": _template(t) for t in range(size.templates)},
        "pools": pools,
    }


def changed(data: dict) -> dict:
    """`data` with every template's CPUs raised: every sandbox container changes, so diff has work to do."""
    out = copy.deepcopy(data)
    for template in out["templates"].values():
        template["limits"]["cpus"] = 2
    for host in out["hosts"].values():
        host["capacity"]["cpus"] *= 2
    return out


def write(data: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SCHEMA_COMMENT + yaml.safe_dump(data, sort_keys=False))
    return path


def write_pair(size: Size, folder: Path) -> tuple[Path, Path]:
    """`stack-<label>.yaml` (base) and `stack-<label>-head.yaml` (changed) in `folder`."""
    data = generate(size)
    return (write(data, folder / f"stack-{size.label}.yaml"),
            write(changed(data), folder / f"stack-{size.label}-head.yaml"))
