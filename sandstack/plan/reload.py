"""A host service's configuration apart from its container, as plain values (docs/design/live-changes.md).

What changes when pools, allow-lists, routes, lifetimes, rate bounds or URLs change is no longer the service
container's inputs: it is a `ConfigSet`, delivered by a small run-once container of its own (the role's *reload*
container) into the service's configuration volume, which the running service watches and applies in place. So a
changed configuration replaces only the reload container; the service keeps its process, its connections, its
sessions and its clocks.

The protocol on the volume (paths in sandstack.spec.contract): the reload container writes the set as
`sets/<digest>/<NAME>` (one file per item), joins the service to the networks the set names (the gateway and the
ingress, through the host's Docker socket), then points `want` at the set; the service checks it (squid's parse,
Caddy's adapter, ...), applies it, and writes the digest to `status/have` (or `<digest> <why>` to `status/refused`,
keeping what it has). The reload container exits 0 once `have` names its digest, 1 when refused or after
`WAIT_SECONDS`; Pulumi waits for it (`attach`) and the component fails the apply with its log when it exits non-zero
(components/register.py), so when `pulumi up` returns, every service has the new configuration in force.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from sandstack.plan.container import LogRotation
from sandstack.plan.contract import CONFIG_DIR
from sandstack.plan.package_files import RELOAD_SOURCE

# How long a reload container waits for its service to take the configuration (the guard applies it on its next
# pass, every 3 s; squid and Caddy within a second).
WAIT_SECONDS = 60
MEMORY_MB = 48
CPUS = "0.25"
LOGS = LogRotation("1m", 1)
# The reload container runs this program (components/assets/reload.py) with the infra image's Python.
PROGRAM = RELOAD_SOURCE.read_text()
COMMAND = ["python3", "-c", PROGRAM]
# Its own variables; an item's name may not start with this.
CONTROL = "SANDSTACK_CONFIG_"
# The service side of the protocol, for the services written in shell (the guard, the gateway's and the ingress's
# entrypoints): put before their script, with SANDSTACK_CONFIG_DIR in their environment.
SERVICE_SH = r"""
cfg_dir=${SANDSTACK_CONFIG_DIR:?}
# The wanted set's digest; fails while there is none.
cfg_want() { cfg_link=$(readlink "$cfg_dir/want" 2>/dev/null) || return 1; printf '%s\n' "${cfg_link##*/}"; }
# $1: digest, $2: item name.
cfg_item() { cat "$cfg_dir/sets/$1/$2"; }
# $1: have or refused, $2: what to report (the digest in force; a refused one's digest and why).
cfg_report() { printf '%s\n' "$2" >"$cfg_dir/status/.$1.$$" && mv -f "$cfg_dir/status/.$1.$$" "$cfg_dir/status/$1"; }
# One look at `want` for a service that runs one program under a loop: a new set is given to its `take` (which sets
# `why` when it refuses), then reported; $1 names the service in its log. Keeps `applied` and `refused`.
cfg_follow() {
  if want=$(cfg_want) && [ "$want" != "$applied" ] && [ "$want" != "$refused" ]; then
    if take "$want"; then applied=$want; cfg_report have "$want"
    else refused=$want; cfg_report refused "$want $why"; echo "$1: refused $want: $why" >&2; fi
  fi
}
"""


@dataclass(frozen=True)
class Join:
    """A network the service must be on besides its own, at a fixed address (the guard opens exactly that one)."""

    network: str  # the network's Docker name
    address: str
    aliases: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        return " ".join((self.network, self.address, *self.aliases))


@dataclass(frozen=True)
class ConfigSet:
    """One role's configuration on one host: named text items, in a fixed order."""

    role: str
    items: tuple[tuple[str, str], ...]
    joins: tuple[Join, ...] = ()  # networks the reload container joins the service to (they are part of the set)
    wait_seconds: int = WAIT_SECONDS  # how long its reload container waits for the service (not part of the set)

    def __post_init__(self) -> None:
        names = [name for name, _ in self.items]
        if len(set(names)) != len(names) or any(n.startswith(CONTROL) or not n.isidentifier() for n in names):
            raise ValueError(f"{self.role}: configuration items are distinct identifiers outside {CONTROL}*: {names}")

    @property
    def digest(self) -> str:
        """What the service reports once it has this set in force: the same set, the same digest, on every host."""
        body = json.dumps([self.items, [j.line for j in self.joins]], separators=(",", ":"))
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def env(self, service: str, leave_label: str = "") -> list[str]:
        """The reload container's environment: its control variables, then each item under its own name."""
        control = [f"{CONTROL}DIR={CONFIG_DIR}", f"{CONTROL}DIGEST={self.digest}",
                   f"{CONTROL}KEYS={' '.join(name for name, _ in self.items)}",
                   f"{CONTROL}SERVICE={service}", f"{CONTROL}WAIT={self.wait_seconds}"]
        if self.joins or leave_label:
            control += [f"{CONTROL}JOIN=" + "\n".join(j.line for j in self.joins), f"{CONTROL}LEAVE={leave_label}"]
        return control + [f"{name}={value}" for name, value in self.items]

    def value(self, name: str) -> str:
        return dict(self.items)[name]
