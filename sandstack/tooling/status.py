"""`sandstack status`: the fleet, from the stack outputs through each host's runtime.

Per host: whether its runtime answers (`up`) or not (`lost`, with the reason); per pool placed there, how many
sandboxes are warm (idle, ready for a claim), bound to a session, hibernated (paused) and in any other state
(resetting, unhealthy: out of service). A lost host's pools are listed with no counts: what ran there is lost
until the host is back. Exit 0 when every host answers, 1 when one does not, 2 on unreadable outputs.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from sandstack.tooling.sandbox_cli import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, _client

COLUMNS = ("warm", "bound", "hibernated", "other")
STATUS_COLUMN = {"idle": "warm", "bound": "bound", "paused": "hibernated"}


def fleet(client) -> dict[str, Any]:
    """{host: {"health": "up"|"lost", "error": str|None, "pools": {pool: {column: count} | None}}}."""
    placed: dict[str, list[str]] = {}
    for pool, hosts in client.pools.items():
        for host in hosts:
            placed.setdefault(host, []).append(pool)
    from sandstack.client import SandstackError

    out: dict[str, Any] = {}
    for name, host in client.hosts.items():
        try:
            listed = host.pools()
        except SandstackError as error:
            out[name] = {"health": "lost", "error": error.message, "pools": {p: None for p in placed.get(name, [])}}
            continue
        pools: dict[str, Any] = {}
        for entry in listed:
            counts = dict.fromkeys(COLUMNS, 0)
            for status, count in entry["sandboxes"].items():
                counts[STATUS_COLUMN.get(status, "other")] += count
            pools[entry["pool"]] = counts
        out[name] = {"health": "up", "error": None, "pools": pools}
    return out


def render_text(view: dict[str, Any]) -> str:
    rows = [("HOST", "HEALTH", "POOL", *(c.upper() for c in COLUMNS))]
    for host, info in view.items():
        for pool, counts in (info["pools"] or {"-": None}).items():
            rows.append((host, info["health"], pool, *(str(counts[c]) if counts else "-" for c in COLUMNS)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines += [f"{host}: lost ({info['error']})" for host, info in view.items() if info["health"] == "lost"]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        client = _client(args)
    except ValueError as error:
        print(f"sandstack status: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        view = fleet(client)
    finally:
        client.close()
    print(json.dumps({"hosts": view}, indent=2, sort_keys=True) if args.format == "json" else render_text(view))
    return EXIT_OK if all(info["health"] == "up" for info in view.values()) else EXIT_REFUSED
