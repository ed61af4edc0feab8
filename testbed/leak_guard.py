"""`LeakGuard`: every deployment's safety net and detector for traffic leaving this machine.

Tests and benchmarks send traffic only to this machine's own addresses. A guard drops, in mangle POSTROUTING
(after every filter decision, so it never changes a verdict of the stack's own firewall), packets from the
subnets it covers that leave by the default route's devices, and counts them: a broken isolation or a test
that would have sent a packet off this machine can neither reach outside nor go unnoticed.

`testbed.deploy.Deployment` opens one per deployment before its first apply (covering its `subnet_pool`,
where every sandbox network is carved, so it is in place before any sandbox starts), extends it to every
network of the stack after each apply (the gateway's egress network gets its subnet from Docker), and
checks it when the harness is torn down: `check()` raises `LeakDetected` if it dropped anything.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shlex
import subprocess

from testbed.harness.teardown import pid_alive
from testbed.host_state import iptables_delete, iptables_rules, rule_comment

LEAK_COMMENT_PREFIX = "sntest-leak-"  # "sntest-leak-<pid>-<token>": sweep_dead_leak_guards removes dead runs' rules


class LeakDetected(AssertionError):
    """The guard dropped packets: something tried to send them off this machine."""


def default_route_devices() -> list[str]:
    """The devices of this machine's default routes: where a packet leaves it."""
    route = subprocess.run(["ip", "route", "show", "default"], capture_output=True, text=True).stdout.split()
    return sorted({route[i + 1] for i, word in enumerate(route) if word == "dev"})


def route_device(destination: str) -> str | None:
    """The device the host would send a packet to `destination` by (None: no route)."""
    out = subprocess.run(["ip", "route", "get", destination], capture_output=True, text=True).stdout.split()
    return out[out.index("dev") + 1] if "dev" in out else None


class LeakGuard:
    """Drops and counts packets from the covered subnets leaving by the default route (module docstring)."""

    def __init__(self, what: str):
        self.what = what  # who is guarded, for the failure message ("stack e3x12")
        self.comment = f"{LEAK_COMMENT_PREFIX}{os.getpid()}-{secrets.token_hex(3)}"
        self.devices = default_route_devices()
        self.subnets: list[str] = []
        self.closed = False

    def _rule(self, subnet: str, device: str) -> list[str]:
        return ["POSTROUTING", "-s", subnet, "-o", device, "-m", "comment", "--comment", self.comment, "-j", "DROP"]

    def cover(self, subnets: list[str]) -> None:
        """Adds `subnets` (those already covered, or inside a covered one, are skipped)."""
        for subnet in subnets:
            try:
                network = ipaddress.ip_network(subnet, strict=False)
            except ValueError:
                continue  # a spec's invalid subnet_pool: sandstack refuses it, so nothing is deployed there
            if network.version != 4 or any(network.subnet_of(ipaddress.ip_network(s)) for s in self.subnets):
                continue  # sandstack's networks are IPv4 only; a covered subnet needs no second rule
            for device in self.devices:
                subprocess.run(["iptables", "-w", "-t", "mangle", "-I", *self._rule(str(network), device)],
                               check=True, capture_output=True)
            self.subnets.append(str(network))

    def covers(self, source: str, destination: str) -> bool:
        """Whether a packet from `source` to `destination` would be dropped here: its route leaves by one of
        the guarded devices and the rule for `source`'s subnet and that device is in the firewall now."""
        device = route_device(destination)
        if device not in self.devices:
            return False
        address = ipaddress.ip_address(source)
        subnet = next((s for s in self.subnets if address in ipaddress.ip_network(s)), None)
        if subnet is None:
            return False
        check = subprocess.run(["iptables", "-w", "-t", "mangle", "-C", *self._rule(subnet, device)],
                               capture_output=True)
        return check.returncode == 0

    def dropped(self) -> int:
        total = 0
        for rule in iptables_rules("mangle", "POSTROUTING", counters=True):
            if rule_comment(rule) == self.comment:
                words = shlex.split(rule)
                total += int(words[words.index("-c") + 1])
        return total

    def check(self, leaked: int | None = None) -> None:
        """Raises `LeakDetected` if the guard dropped any packet (`leaked`: a count already read)."""
        leaked = self.dropped() if leaked is None else leaked
        if leaked:
            raise LeakDetected(
                f"{leaked} packet{'s' if leaked > 1 else ''} from {self.what} ({', '.join(self.subnets)}) tried to "
                f"leave this machine by {', '.join(self.devices)} (dropped by the leak guard): tests send traffic "
                f"only to this machine's own addresses")

    def close(self) -> None:
        """Removes the rules, then `check()`s what they counted (once: a second close does nothing)."""
        if self.closed:
            return
        self.closed = True
        leaked = self.dropped()
        for subnet in self.subnets:
            for device in self.devices:
                subprocess.run(["iptables", "-w", "-t", "mangle", "-D", *self._rule(subnet, device)],
                               capture_output=True)
        self.check(leaked)


def sweep_dead_leak_guards() -> None:
    """Removes the rules of LeakGuards whose process no longer exists (a killed run)."""
    for rule in iptables_rules("mangle", "POSTROUTING"):
        comment = rule_comment(rule) or ""
        if comment.startswith(LEAK_COMMENT_PREFIX) and not pid_alive(comment.split("-")[2]):
            iptables_delete("mangle", rule)
