"""A stack that passes every built-in rule, and one change per rule that breaks it."""

from __future__ import annotations

import copy
from typing import Any

from testbed.specs import host, set_path, spec

DIGEST = "@sha256:" + "ab" * 32
CLEAN = spec(
    {
        "agent": {
            "base_image": "python:3.12-slim" + DIGEST,
            "snapshot": {"version": "1", "setup": ["pip install requests"]},
            "limits": {"cpus": 2, "memory": "2GiB", "pids": 256},
            "network": {"egress": "allow-list", "allow": ["api.github.com"]},
            "env": {"MODE": "agent", "GITHUB_TOKEN": {"secret": "githubToken"}},
            "ports": [{"port": 8080, "exposure": "public"}],
            "lifecycle": {"max_lifetime": "8h"},
            "runtime": "runsc",
        },
    },
    hosts={"local": host()},
    policy={"production": True, "untrusted": True, "public_ports": [8080], "registries": ["docker.io/library"]},
)


def changed(*pairs: tuple[str, Any]) -> dict:
    data = copy.deepcopy(CLEAN)
    for path, value in pairs:
        set_path(data, path, value)
    return data
