"""Issue 39 item 2's figure (Docker): cross-host restore time for a 256 MiB workspace through the snapshot store
(docs/design/snapshot-store.md), beside the same restore on the host that took the snapshot.

Two stacks on this daemon stand for two hosts of pool `work` (testbed/registry.py `store_spec`), both keeping
snapshots in Debian's reference registry on this machine's loopback. Each round: a session on host A writes 256 MiB
of random bytes into its workspace and snapshots it (timed: the tars written on A, then pushed to the registry);
a branch from it is claimed on A (timed: A's own copy restored) and on B (timed: downloaded from the registry, its
digests and tars checked, restored); the big file's sha256 is checked on B; everything is released and the
snapshot deleted.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.context import Context
from benchmarks.measure import stat
from benchmarks.results import Figure, SectionResult
from benchmarks.sections import engine

TITLE = "snapshots between hosts: a 256 MiB workspace restored on another host through the snapshot store (Docker)"
PORTS = {"a": 17573, "b": 17574}
TOKEN = "benchmark-runtime-token-snapstore-01"


def run(ctx: Context) -> SectionResult:
    import docker

    from sandstack.client import Client
    from testbed import registry
    from testbed.deploy import Deployment
    from testbed.harness.harness import Harness

    result = SectionResult("snapstore", TITLE)
    if not registry.available():
        raise RuntimeError("docker-registry is not installed (apt-get install docker-registry)")
    imgs = engine.images(docker.from_env(timeout=120))
    took, local, remote = [], [], []
    count = ctx.rounds(5, 2)
    mib = registry.WORKSPACE_MIB
    with tempfile.TemporaryDirectory(prefix="sandstack-bench-snapstore-") as tmp, \
            registry.running(Path(tmp) / "registry") as served:
        harnesses = {"a": Harness(), "b": Harness()}  # one per stack: a harness applies one stack
        secrets = {"runtimeToken": TOKEN, "storePassword": served.password}
        try:
            for name, stack in (("a", "bsnapa"), ("b", "bsnapb")):
                Deployment(harnesses[name], Path(tmp) / name, secret_config=secrets, stack=stack).up(
                    registry.store_spec(imgs.debian, PORTS[name], served.url))
            api = Client.from_outputs({"hosts": {n: {"url": f"http://127.0.0.1:{p}", "token": TOKEN}
                                                 for n, p in PORTS.items()}, "pools": {"work": ["a", "b"]}},
                                      timeout=300)
            for i in range(count):
                on_a = api.sandbox(f"a/{api.host('a').claim('work', f'bench-{i}')['sandbox']}")
                made = on_a.exec(["sh", "-c", f"head -c {mib}M /dev/urandom > /workspace/big.bin && "
                                              "sha256sum /workspace/big.bin"], timeout=120)
                started = time.perf_counter()
                snap = on_a.snapshot()
                took.append(time.perf_counter() - started)
                on_a.release()
                for name, times in (("a", local), ("b", remote)):
                    started = time.perf_counter()
                    branch = api.host(name).claim("work", f"bench-{i}-{name}", from_snapshot=snap.id)
                    times.append(time.perf_counter() - started)
                    box = api.sandbox(f"{name}/{branch['sandbox']}")
                    if name == "b":
                        seen = box.exec(["sha256sum", "/workspace/big.bin"], timeout=120).stdout
                        if seen != made.stdout:
                            raise AssertionError(f"host b restored other bytes: {seen!r} != {made.stdout!r}")
                    box.release()
                api.host("a").delete_snapshot(snap.id)
            api.close()
        finally:
            for harness in harnesses.values():
                harness.teardown()
    ctx.log(f"snapstore: snapshot {statistics.median(took):.2f} s, restore on A {statistics.median(local):.2f} s, "
            f"on B {statistics.median(remote):.2f} s")
    result.figures += [
        Figure("snapstore.snapshot_s", f"snapshot of a {mib} MiB workspace on host A, kept in the store too "
               f"(min–max of {len(took)})", "s", stat(took)),
        Figure("snapstore.restore_same_host_s", "a branch from it on host A (its own copy)", "s", stat(local)),
        Figure("snapstore.restore_cross_host_s", "a branch from it on host B (downloaded from the store, checked, "
               "restored)", "s", stat(remote)),
    ]
    return result
