"""The repository's Pulumi program run under in-process mocks, as its own process (so its peak memory is its own).

    python -m benchmarks.mock_program STACKFILE [--stack NAME]

Runs `sandstack.program.program(STACKFILE)` exactly as `pulumi up` would run it (components, child
resources, exported outputs, every outstanding Output awaited), with `pulumi.runtime.set_mocks` standing in
for the engine. The mocks here do the least a provider would: echo the inputs back with the computed outputs
the components read (container addresses and ports, image ids). They are deliberately not the test suite's
recording harness (testbed/provider/mocks.py), which also checks every field against the provider's schema:
this measures sandstack's program, not the test harness. Prints one JSON line: registrations by kind.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

import pulumi
from pulumi.runtime import mocks as pulumi_mocks


class EchoMocks(pulumi_mocks.Mocks):
    """Inputs back as outputs, plus the computed outputs the components read; counts registrations."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()  # new_resource is called from several worker threads at once

    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str, dict]:
        with self._lock:
            self.counts[args.typ.rsplit(":", 1)[-1]] += 1
        ident = hashlib.sha256(f"{args.typ}/{args.name}".encode()).hexdigest()
        out = dict(args.inputs)
        out.setdefault("name", args.name)  # no auto-naming under mocks; dependent inputs need a name
        title = args.typ.rsplit(":", 1)[-1]
        if title == "Container":
            nets = [n.get("name") for n in out.get("networksAdvanced") or []] or ["bridge"]
            out["networkDatas"] = [{"networkName": net, "ipAddress": f"172.30.{i}.2", "ipPrefixLength": 24,
                                    "gateway": f"172.30.{i}.1", "macAddress": ""} for i, net in enumerate(nets)]
            out["ports"] = [{**p, "external": int(p.get("external") or 32768 + i), "ip": p.get("ip", "0.0.0.0"),
                             "protocol": p.get("protocol", "tcp")} for i, p in enumerate(out.get("ports") or [])]
        elif title == "RemoteImage":
            out.update(imageId="sha256:" + ident, repoDigest="")
        return ident[:64], out

    def call(self, args: pulumi_mocks.MockCallArgs) -> dict:
        return {}


def run(spec: Path, stack: str) -> dict[str, int]:
    from sandstack.program import program  # after the mocks module: import cost is part of the run anyway

    mocks = EchoMocks()
    pulumi.runtime.set_mocks(mocks, project="sandstack", stack=stack, preview=False)
    with tempfile.TemporaryDirectory(prefix="sandstack-bench-build-") as build:
        # pulumi.runtime.test awaits every outstanding Output, so an exception in an apply fails the run.
        pulumi.runtime.test(lambda: program(spec, build_root=Path(build)).sandboxes)()
    return dict(sorted(mocks.counts.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mock_program")
    parser.add_argument("spec", type=Path)
    parser.add_argument("--stack", default="bench")
    args = parser.parse_args(argv)
    counts = run(args.spec, args.stack)
    print(json.dumps({"registrations": sum(counts.values()), "by_type": counts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
