"""Issue 24's figures (Docker, root): the same pools deployed on three hosts vs on one, claims through failover
with one host down, and how long the client takes to detect a lost host; and issue 36's three-host figure: a deny
entry of a gateway pool changed on all three hosts, from the apply's start to the new configuration in force on every
host (goal ≤ 3 s).

The hosts are extra `dockerd`s on this machine, each in its own namespaces (testbed/hosts.py), reached over a
unix socket, ssh and tcp+TLS, applied through one provider per host (testbed/hosts_stack.py). One run each: the
deploys take about half a minute. All daemons share this machine's cores, so three hosts cost more CPU here than
three machines would: the ratio is an upper bound.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from benchmarks.context import Context
from benchmarks.measure import stat
from benchmarks.results import Figure, Goal, SectionResult

TITLE = "many hosts: deploy on 3 vs 1, claims through failover (Docker, root)"
CLAIMS = 5


def run(ctx: Context) -> SectionResult:
    from testbed.hosts_stack import claim_seconds, fleet_deployed  # Docker sections only: see engine.py

    result = SectionResult("hosts", TITLE)
    live: list[float] = []
    renewed = 0
    with tempfile.TemporaryDirectory(prefix="sandstack-bench-hosts-") as tmp:
        with fleet_deployed(["local"], Path(tmp) / "one") as one:
            single = one.deploy_seconds
        ctx.log(f"one host: deployed in {single:.1f} s")
        with fleet_deployed(["local", "ssh", "tcp"], Path(tmp) / "three") as three:
            # Issue 36: a deny entry added to, then taken off, a gateway pool on all three hosts; the apply returns
            # once every host's gateway and logging resolver report the new configuration in force.
            for index in range(ctx.rounds(3, 1)):
                for deny in (("blocked.test",), ()):
                    three.rewrite(deny=deny)
                    started = time.monotonic()
                    outcome = three.up()
                    live.append(time.monotonic() - started)
                    # Only the reload containers run again (a reload is their replacement): nothing else changes.
                    renewed += sum(1 for a in outcome.actions
                                   if a.kind != "same" and not a.name.endswith("-reload"))
                    ctx.log(f"three hosts, round {index + 1}: deny {'+' if deny else '-'}blocked.test in force in "
                            f"{live[-1]:.2f} s")
            client = three.client()
            try:
                healthy = claim_seconds(client, "open", "healthy", CLAIMS)
                three.hosts["tcp"].stop_daemon()
                session = next(f"first-{i}" for i in range(100) if client.hosts_for("open", f"first-{i}")[0] == "tcp")
                started = time.monotonic()
                client.claim("open", session).release()
                detect = time.monotonic() - started
                failover = claim_seconds(client, "open", "failover", CLAIMS, prefer="tcp")
            finally:
                client.close()
                three.hosts["tcp"].start_daemon()  # so that teardown reaches it
        ctx.log(f"three hosts: deployed in {three.deploy_seconds:.1f} s; claim {healthy * 1000:.0f} ms, "
                f"through failover {failover * 1000:.0f} ms; detection {detect * 1000:.0f} ms")
    result.figures += [
        Figure("hosts.deploy_1_s", "deploy: 3 pools (4 sandboxes) on 1 host", "s", stat([single])),
        Figure("hosts.deploy_3_s", "deploy: the same pools on 3 hosts (unix, ssh, tcp+TLS)", "s",
               stat([three.deploy_seconds])),
        Figure("hosts.deploy_ratio", "deploy on 3 hosts / on 1", "×", stat([three.deploy_seconds / single]),
               Goal("<=", 1.5)),
        Figure("hosts.claim_ms", "claim p50, every host up", "ms", stat([healthy * 1000])),
        Figure("hosts.claim_failover_ms", "claim p50, the session's first host down (after detection)", "ms",
               stat([failover * 1000])),
        Figure("hosts.failover_ratio", "claim through failover / healthy claim", "×", stat([failover / healthy]),
               Goal("<=", 2)),
        Figure("hosts.detect_ms", "first claim meeting the lost host (daemon down, machine up)", "ms",
               stat([detect * 1000])),
        Figure("hosts.live_3_s", "a deny entry changed on 3 hosts: apply to in force on every host", "s",
               stat(live), Goal("<=", 3.0)),
    ]
    result.notes.append(f"{len(live)} applies of a deny entry on three hosts (added, then taken off); anything but a "
                        f"reload container created, updated, replaced or deleted by them: {renewed}.")
    return result
