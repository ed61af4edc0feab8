"""`LeakGuard`: a safety net and detector for the network tests.

It drops, in mangle POSTROUTING (after every filter decision, so it never changes a verdict), packets from
the tests' networks leaving by the default route, and counts them: a broken isolation can neither reach
outside this machine nor go unnoticed.
"""

from __future__ import annotations

import os
import secrets
import shlex
import subprocess

from testbed.harness.teardown import pid_alive
from testbed.host_state import iptables_delete, iptables_rules, rule_comment

LEAK_COMMENT_PREFIX = "sntest-leak-"  # "sntest-leak-<pid>-<token>": the lab sweep removes dead runs' rules


class LeakGuard:
    """Drops and counts packets from `subnets` leaving by the default route (see the module docstring)."""

    def __init__(self, subnets: list[str]):
        self.subnets = subnets
        self.comment = f"{LEAK_COMMENT_PREFIX}{os.getpid()}-{secrets.token_hex(3)}"
        route = subprocess.run(["ip", "route", "show", "default"], capture_output=True, text=True).stdout.split()
        self.devices = sorted({route[i + 1] for i, word in enumerate(route) if word == "dev"})

    def _rules(self) -> list[list[str]]:
        return [["POSTROUTING", "-s", subnet, "-o", dev, "-m", "comment", "--comment", self.comment, "-j", "DROP"]
                for subnet in self.subnets for dev in self.devices]

    def open(self) -> None:
        for rule in self._rules():
            subprocess.run(["iptables", "-w", "-t", "mangle", "-I", *rule], check=True, capture_output=True)

    def dropped(self) -> int:
        total = 0
        for rule in iptables_rules("mangle", "POSTROUTING", counters=True):
            if rule_comment(rule) == self.comment:
                words = shlex.split(rule)
                total += int(words[words.index("-c") + 1])
        return total

    def close(self) -> None:
        leaked = self.dropped()
        for rule in self._rules():
            subprocess.run(["iptables", "-w", "-t", "mangle", "-D", *rule], capture_output=True)
        assert leaked == 0, f"{leaked} packets from the tests' networks tried to leave this machine (dropped)"


def sweep_dead_leak_guards() -> None:
    """Removes the rules of LeakGuards whose test process no longer exists (a killed run)."""
    for rule in iptables_rules("mangle", "POSTROUTING"):
        comment = rule_comment(rule) or ""
        if comment.startswith(LEAK_COMMENT_PREFIX) and not pid_alive(comment.split("-")[2]):
            iptables_delete("mangle", rule)
