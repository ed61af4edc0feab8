"""What a change costs a month, where the platform declares prices: a price list the organisation owns (like
Infracost's usage file), given to `sandstack diff --prices FILE` or named by an organisation policy file
(`prices: FILE`, relative to it). Without one, the review shows no figure at all: nothing is invented.

    currency: EUR
    hours_per_month: 730          # optional: 730 (365 × 24 / 12)
    per_hour:                     # what a reserved unit costs an hour; each optional
      cpu: 0.031                  # a CPU
      memory_gib: 0.004           # a GiB of memory
      disk_gib: 0.0001            # a GiB of disk
      gpu: 1.90                   # a GPU
    hosts:                        # a host billed whole, whatever its pools reserve (per_hour does not apply to it)
      gpu-1: 2.40

A host named under `hosts` costs its price an hour; any other host costs what its pools reserve warm (`replicas`)
at the `per_hour` prices, and up to what they reserve at the on-demand ceiling (`max`). A host that reserves
something the list has no price for is not priced, and the review names it instead of guessing; a priced figure
then covers the priced hosts only, and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandstack.spec.errors import SpecError
from sandstack.spec.loader import load
from sandstack.spec.reserve import Amount, reservations
from sandstack.spec.resolve import ResolvedStack
from sandstack.spec.units import GIB

UNITS = {"cpu": ("cpus", 1), "memory_gib": ("memory", GIB), "disk_gib": ("disk", GIB), "gpu": ("gpus", 1)}
KEYS = ("currency", "hours_per_month", "per_hour", "hosts")
HOURS_PER_MONTH = 730.0


@dataclass(frozen=True)
class Prices:
    file: str
    currency: str
    hours_per_month: float = HOURS_PER_MONTH
    per_hour: dict[str, float] = field(default_factory=dict)  # UNITS key → price an hour
    hosts: dict[str, float] = field(default_factory=dict)  # host → price an hour, billed whole


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def load_prices(path: str | Path) -> Prices:
    """The price list, or SpecError with every problem located (file:line:col, the key, the value and what is
    allowed)."""
    doc = load(path)
    data, errors = doc.data, []
    if not isinstance(data, dict):
        raise SpecError([doc.diagnostic((), "a price list is a mapping with 'currency' and 'per_hour' or 'hosts'",
                                        "prices")])
    for key in sorted(set(data) - set(KEYS)):
        errors.append(doc.diagnostic((key,), f"unknown key {key!r}: allowed are {', '.join(KEYS)}", "prices",
                                     key=True))
    currency = data.get("currency")
    if not (isinstance(currency, str) and currency.strip() and len(currency) <= 8):
        errors.append(doc.diagnostic(("currency",), f"{currency!r} is not a currency: write its code, e.g. EUR or "
                                     "USD (at most 8 characters)", "prices"))
    hours = data.get("hours_per_month", HOURS_PER_MONTH)
    if not (_number(hours) and 0 < hours <= 744):
        errors.append(doc.diagnostic(("hours_per_month",), f"{hours!r} is not a number of hours in a month "
                                     "(above 0, at most 744)", "prices"))
    tables: dict[str, dict[str, float]] = {}
    for key, allowed in (("per_hour", tuple(UNITS)), ("hosts", None)):
        table = data.get(key) or {}
        if not isinstance(table, dict):
            errors.append(doc.diagnostic((key,), f"'{key}' is a mapping of names to prices an hour", "prices"))
            continue
        for name, price in table.items():
            if allowed is not None and name not in allowed:
                errors.append(doc.diagnostic((key, name), f"unknown unit {name!r}: allowed are {', '.join(allowed)}",
                                             "prices", key=True))
            elif not _number(price):
                errors.append(doc.diagnostic((key, name), f"{price!r} is not a price an hour (a number, 0 or more)",
                                             "prices"))
        tables[key] = {str(k): float(v) for k, v in table.items() if _number(v)}
    if not errors and not tables.get("per_hour") and not tables.get("hosts"):
        errors.append(doc.diagnostic((), "a price list declares 'per_hour' prices, 'hosts' prices or both", "prices"))
    if errors:
        raise SpecError(errors)
    return Prices(doc.file, currency.strip(), float(hours), tables.get("per_hour", {}), tables.get("hosts", {}))


@dataclass(frozen=True)
class Side:
    """One side's monthly cost of the priced hosts, warm and at the ceiling, and the hosts left unpriced."""

    warm: float
    ceiling: float
    unpriced: tuple[str, ...]  # `host (no price for gpu)`


@dataclass(frozen=True)
class Cost:
    prices: Prices
    before: Side
    after: Side
    hosts: tuple[tuple[str, float, float], ...]  # (host, warm before, warm after) of priced hosts whose cost changes

    def money(self, value: float, sign: bool = False) -> str:
        text = f"{abs(value):,.2f}"
        return (("+" if value >= 0 else "-") if sign else ("-" if value < 0 else "")) + text

    def headline(self) -> str:
        c = self.prices.currency
        text = (f"Cost: {self.money(self.before.warm)} → {self.money(self.after.warm)} {c} a month "
                f"({self.money(self.after.warm - self.before.warm, sign=True)})")
        if (self.before.ceiling, self.after.ceiling) != (self.before.warm, self.after.warm):
            text += f", up to {self.money(self.after.ceiling)} at the on-demand ceiling"
        if self.after.unpriced:
            text += f"; not priced: {', '.join(self.after.unpriced)}"
        return text + "."

    def lines(self) -> list[str]:
        """Per host whose cost changes (hosts alike folded), then the price list's file."""
        c = self.prices.currency
        alike: dict[str, list[str]] = {}
        for h, a, b in self.hosts:
            alike.setdefault(f"{self.money(a)} → {self.money(b)} {c} a month ({self.money(b - a, sign=True)})",
                             []).append(h)
        out = [(f"host {hosts[0]}" if len(hosts) == 1 else f"hosts {', '.join(hosts)} (each)") + f": {words}"
               for words, hosts in alike.items()]
        return out + [f"prices: {self.prices.file}"]

    def to_json(self) -> dict[str, Any]:
        return {"currency": self.prices.currency, "prices": self.prices.file,
                "hours_per_month": self.prices.hours_per_month,
                "before": {"warm": round(self.before.warm, 2), "ceiling": round(self.before.ceiling, 2),
                           "unpriced": list(self.before.unpriced)},
                "after": {"warm": round(self.after.warm, 2), "ceiling": round(self.after.ceiling, 2),
                          "unpriced": list(self.after.unpriced)},
                "difference": round(self.after.warm - self.before.warm, 2),
                "hosts": [{"host": h, "before": round(a, 2), "after": round(b, 2)} for h, a, b in self.hosts]}


def _amount_cost(amount: Amount, prices: Prices) -> tuple[float, list[str]]:
    total, missing = 0.0, []
    for unit, (dim, scale) in UNITS.items():
        value = amount.get(dim)
        if not value:
            continue
        if unit not in prices.per_hour:
            missing.append(unit)
            continue
        total += value / scale * prices.per_hour[unit]
    return total * prices.hours_per_month, missing


def _side(spec: ResolvedStack, prices: Prices) -> tuple[Side, dict[str, float]]:
    warm = ceiling = 0.0
    unpriced, per_host = [], {}
    for name, host in sorted(reservations(spec).hosts.items()):
        if name in prices.hosts:
            month = prices.hosts[name] * prices.hours_per_month
            warm, ceiling, per_host[name] = warm + month, ceiling + month, month
            continue
        w, missing = _amount_cost(host.warm, prices)
        c, missing_c = _amount_cost(host.ceiling, prices)
        lacking = sorted(set(missing) | set(missing_c))
        if lacking:
            unpriced.append(f"host {name} (no price for {', '.join(lacking)})")
            continue
        warm, ceiling, per_host[name] = warm + w, ceiling + c, w
    return Side(warm, ceiling, tuple(unpriced)), per_host


def cost(old: ResolvedStack, new: ResolvedStack, prices: Prices) -> Cost:
    before, a = _side(old, prices)
    after, b = _side(new, prices)
    hosts = tuple((h, a.get(h, 0.0), b.get(h, 0.0)) for h in sorted(set(a) | set(b))
                  if abs(a.get(h, 0.0) - b.get(h, 0.0)) >= 0.005)
    return Cost(prices, before, after, hosts)
