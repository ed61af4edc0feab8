"""The review suite's specs: one base stack and one change of each kind a reviewer must see."""

from __future__ import annotations

import copy
from typing import Any, Callable

from testbed.specs import host, spec

FILES = {"files/tool.sh": "echo tool\n"}

BASE = spec(
    {
        "agent": {
            "base_image": "python:3.12-slim",
            "snapshot": {"version": "1", "setup": ["pip install requests"],
                         "files": [{"source": "files/tool.sh", "path": "/usr/local/bin/tool", "mode": "0755"}]},
            "limits": {"cpus": 1, "memory": "1GiB", "pids": 256},
            "network": {"egress": "allow-list", "allow": ["api.github.com"], "deny": ["gist.github.com"]},
            "env": {"MODE": "agent", "GITHUB_TOKEN": {"secret": "githubToken"}},
            "ports": [{"port": 8000, "exposure": "host", "name": "api"}],
            "lifecycle": {"max_lifetime": "8h", "idle_timeout": "30m"},
            "runtime": "runsc",
        },
        "shell": {"base_image": "busybox:1.36", "command": ["sleep", "infinity"]},
    },
    pools={"agent": {"template": "agent", "hosts": ["gpu-1"], "replicas": 3},
           "shell": {"template": "shell", "hosts": ["gpu-1"], "replicas": 2}},
    hosts={"gpu-1": host("ssh://deploy@gpu-1.example.com")},
)


def _set(path: str, value: Any) -> Callable[[dict], None]:
    def change(data: dict) -> None:
        node = data
        *parents, last = path.split(".")
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        if value is None:
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return change


def _port_url(data: dict) -> None:
    data["hosts"]["gpu-1"]["ingress"] = {"domain": "sbx.example.com"}
    port = data["templates"]["agent"]["ports"][0]
    port.pop("host_port", None)
    port["exposure"] = "url"


def _host_added(data: dict) -> None:
    data["hosts"]["gpu-2"] = host("ssh://deploy@gpu-2.example.com")
    data["pools"]["shell"]["hosts"] = ["gpu-1", "gpu-2"]


def _shell_allow_all(data: dict) -> None:
    data["templates"]["shell"]["network"] = {"egress": "allow-all"}


# The cases whose base is BASE with a change of its own (applied to both sides before the case's change).
BASES: dict[str, Callable[[dict], None]] = {"protocols-any": _shell_allow_all}

CASES: dict[str, Callable[[dict], None]] = {
    "version-bumped": _set("templates.agent.snapshot.version", "2"),
    "setup-without-bump": _set("templates.agent.snapshot.setup", ["pip install requests httpx"]),
    "allow-widened": _set("templates.agent.network.allow", ["api.github.com", "pypi.org"]),
    "deny-removed": _set("templates.agent.network.deny", None),
    "port-public": _set("templates.agent.ports.0.exposure", "public"),
    "port-url": _port_url,
    "pool-resized": _set("pools.agent.replicas", 5),
    "replicas-zero": _set("pools.shell.replicas", 0),
    "host-added": _host_added,
    "limits-raised": _set("templates.agent.limits.memory", "4GiB"),
    "cpus-raised": _set("templates.agent.limits.cpus", 2),
    "secret-repointed": _set("templates.agent.env.GITHUB_TOKEN", {"secret": "githubTokenV2"}),
    "capability-added": lambda d: (_set("templates.shell.security", {"capabilities": ["NET_BIND_SERVICE"]})(d),
                                   _set("templates.shell.user", "0:0")(d)),
    "runtime-changed": _set("templates.agent.runtime", "runc"),
    "user-root": _set("templates.shell.user", "root"),
    "protocols-any": _set("templates.shell.network.protocols", "any"),
}
# The cases read the other way round.
REVERSED = {"host-removed": "host-added", "protocols-http": "protocols-any"}


def pair(case: str) -> tuple[dict, dict]:
    """(base, head) of a case; a case in REVERSED is its other case the other way round."""
    if case in REVERSED:
        return pair(REVERSED[case])[::-1]
    base = copy.deepcopy(BASE)
    BASES.get(case, lambda data: None)(base)
    head = copy.deepcopy(base)
    CASES[case](head)
    return base, head


PAIRS = [*CASES, *REVERSED]
