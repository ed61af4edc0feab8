"""What a stack leaves on the host outside Docker, and the check that it left nothing.

The host guard writes, per stack, cgroup parents (`<cgroup mount>/sandstack/sandstack-<stack>-*`) and
firewall rules tagged with the comment "sandstack:<stack>"; it removes both once the stack's networks are
gone. `clear_host_state(stack)` is the one check every module deployment runs at teardown.

- `guard_rules(stack)` / `sandbox_cgroups(stack)`: what is there now (every iptables backend and family).
- `iptables_rules` / `rule_comment` / `iptables_delete`: the iptables primitives (also used by the leak guard,
  testbed/leak_guard.py).
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
from pathlib import Path

from testbed.waiting import wait_until

CGROUP_ROOT = Path("/sys/fs/cgroup")
GUARD_BINARIES = ("iptables-nft", "iptables-legacy", "ip6tables-nft", "ip6tables-legacy")


def iptables_rules(table: str, chain: str | None = None, binary: str = "iptables",
                   counters: bool = False) -> list[str]:
    cmd = [binary, "-w", "-t", table, "-S"] + ([chain] if chain else []) + (["-v"] if counters else [])
    out = subprocess.run(cmd, capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if line.startswith("-A ")]


def rule_comment(rule: str) -> str | None:
    words = shlex.split(rule)
    return words[words.index("--comment") + 1] if "--comment" in words else None


def iptables_delete(table: str, rule: str, binary: str = "iptables") -> None:
    words = shlex.split(rule)
    if "-c" in words:  # counters printed by -v
        i = words.index("-c")
        del words[i:i + 3]
    subprocess.run([binary, "-w", "-t", table, "-D", *words[1:]], capture_output=True)


def guard_rules(stack: str) -> list[str]:
    """Every firewall rule tagged for `stack` ("sandstack:<stack>", exactly), in both iptables backends
    and both address families, prefixed with the binary that lists it."""
    found = []
    for binary in GUARD_BINARIES:
        for rule in iptables_rules("filter", binary=binary):
            if rule_comment(rule) == f"sandstack:{stack}":
                found.append(f"{binary} {rule}")
    return found


def remove_guard_rules(stack: str) -> list[str]:
    """Fallback cleanup after a failed test: deletes whatever `guard_rules(stack)` lists."""
    removed = guard_rules(stack)
    for entry in removed:
        binary, rule = entry.split(" ", 1)
        iptables_delete("filter", rule, binary)
    return removed


def sandbox_cgroups(stack: str) -> list[Path]:
    return sorted(CGROUP_ROOT.glob(f"*/sandstack/sandstack-{stack}-*"))


def clear_host_state(stack: str, timeout: float = 15) -> list[str]:
    """Waits up to `timeout` seconds for the guard to remove `stack`'s firewall rules and cgroup parents;
    returns what was still there at the deadline (empty: the host is clean) after removing it, so that a
    failed test does not leave the host dirty for the next run."""
    left: list[str] = []

    def gone() -> bool:
        left[:] = guard_rules(stack) + [str(d) for d in sandbox_cgroups(stack)]
        return not left

    wait_until(gone, timeout, what=f"host cleanup of stack {stack}", check=False)
    if left:
        remove_guard_rules(stack)
        for d in sandbox_cgroups(stack):
            with contextlib.suppress(OSError):
                d.rmdir()
    return left
