"""The change drill (docs/design/live-changes.md): apply one change to a live stack while its sandboxes keep making
requests, and count what the change interrupted. Used by tests/engine/test_live_changes.py (which asserts it) and
the benchmark section `live` (which reports its times).

    drill = Drill(deployment, client)                     # a deployed stack (testbed.deploy.Deployment)
    drill.traffic("listed", 0, "http://allowed.test/")    # a loop in that sandbox: a request every 100 ms
    outcome = drill.apply(new_spec_text)                   # `pulumi up` of the change, under the harness
    outcome.failed, outcome.renewed, outcome.restarted, outcome.predicted

What it counts, from outside the stack: requests that did not answer 200 while the apply ran (each loop's own log in
its sandbox), host services whose container was renewed or restarted (its id or its start time changed; a role's
reload container is run once per configuration and not counted), sandboxes likewise; and what `sandstack diff`
predicted for the same two specs (its impact: which services it renews, how many sandboxes restart per pool).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import time
from dataclasses import dataclass, field
from typing import Callable

from sandstack.plan.contract import LABEL_POOL, LABEL_ROLE, LABEL_STACK
from sandstack.spec.roles import HOST_ROLES

# Each host service's container, by the kind the review's impact names it with.
SERVICE_OF_KIND = {role.container.kind: name for name, role in HOST_ROLES.items() if role.container}
RENEWING = ("replace", "delete")  # impact actions that end a service's process (not update, not reload)
LOG = "/tmp/sandstack-drill.log"
PERIOD = 0.1

# A request every PERIOD through the sandbox's own proxy settings; one "<start> <status>" line each, or "<start> <why>"
# (the error's class: ConnectionRefusedError, timeout, ...) for a request that got no answer.
LOOP = r'''
import os, sys, time, urllib.error, urllib.request
url, out, period = sys.argv[1], sys.argv[2], float(sys.argv[3])
proxy = os.environ.get("HTTP_PROXY")
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy} if proxy else {}))
with open(out, "a", buffering=1) as log:
    while True:
        start = time.time()
        try:
            status = opener.open(url, timeout=2).status
        except urllib.error.HTTPError as error:
            status = error.code
        except Exception as error:  # no answer: why (the innermost cause's class)
            while isinstance(error, urllib.error.URLError) and isinstance(error.reason, Exception):
                error = error.reason
            status = type(error).__name__
        log.write(f"{start:.3f} {status}\n")
        time.sleep(max(0.0, period - (time.time() - start)))
'''


@dataclass
class Outcome:
    """One applied change, seen from outside."""

    seconds: float                     # the apply, start to return (every reload waited for)
    requests: int                      # requests the loops started while it ran
    failed: list[str]                  # those that did not answer 200: "<sandbox> <start> <status or why>"
    renewed: set[str]                  # host services (by role name) whose container was renewed or restarted
    restarted: dict[str, int]          # pool -> sandboxes renewed or restarted
    predicted_renewed: set[str]        # what the diff says renews
    predicted_restarted: dict[str, int]
    diff: dict = field(repr=False, default_factory=dict)


class Drill:
    def __init__(self, deployment, client):
        self.deployment, self.client = deployment, client
        self.loops: list[str] = []  # sandbox container names running a loop

    def traffic(self, pool: str, index: int, url: str) -> None:
        """Starts a request loop in a sandbox (a detached exec: it runs as long as the sandbox does)."""
        name = self.deployment.name(pool, str(index))
        container = self.client.containers.get(name)
        container.exec_run(["python3", "-c", LOOP, url, LOG, str(PERIOD)], detach=True)
        self.loops.append(name)

    def state(self) -> dict[str, tuple[str, str, str, str]]:
        """Every container of the stack: name -> (id, start time, role, pool)."""
        found = {}
        for c in self.client.api.containers(all=True, filters={"label": f"{LABEL_STACK}={self.deployment.stack}"}):
            info = self.client.api.inspect_container(c["Id"])
            labels = info["Config"]["Labels"] or {}
            found[info["Name"].lstrip("/")] = (info["Id"], info["State"]["StartedAt"], labels.get(LABEL_ROLE, ""),
                                               labels.get(LABEL_POOL, ""))
        return found

    def log(self, name: str) -> list[tuple[float, int | str]]:
        """A loop's requests: (start, HTTP status), or (start, why) for one that got no answer."""
        code, out = self.client.containers.get(name).exec_run(["cat", LOG])
        if code != 0:
            return []
        return [(float(a), int(b) if b.isdigit() else b)
                for a, b in (line.split() for line in out.decode().splitlines() if line.strip())]

    def predicted(self, old: str, new: str) -> dict:
        """`sandstack diff OLD NEW --format json` for this stack (its impact: what renews, what restarts)."""
        from sandstack.tooling.cli import main

        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(["diff", old, new, "--stack", self.deployment.stack, "--format", "json"])
        assert code == 0, f"sandstack diff exited {code}"
        return json.loads(out.getvalue())

    def apply(self, spec_text: str) -> Outcome:
        spec = self.deployment.spec_path
        before_spec = spec.with_name("before.yaml")
        shutil.copyfile(spec, before_spec)
        self.deployment.write(spec_text)
        report = self.predicted(str(before_spec), str(spec))
        impact = report["impact"]
        predicted_renewed = {SERVICE_OF_KIND.get(s["kind"], s["kind"]) for s in impact["services"]
                             if s["action"] in RENEWING}
        predicted_restarted = {p["pool"]: p["restart"] for p in impact["pools"] if p["restart"]}
        return self._measure(self.deployment.up, predicted_renewed, predicted_restarted, report)

    def run(self, change: Callable[[], object]) -> Outcome:
        """A change made at run time, not by an apply (a session's network profile switched through the runtime):
        counted as an apply is; nothing is predicted to renew or restart (the diff has nothing to say)."""
        return self._measure(change, set(), {}, {})

    def _measure(self, change: Callable[[], object], predicted_renewed: set[str],
                 predicted_restarted: dict[str, int], report: dict) -> Outcome:
        before = self.state()
        start = time.time()
        change()
        end = time.time()
        time.sleep(3 * PERIOD)  # the last request started before the end has answered
        after = self.state()
        renewed, restarted = set(), {}
        for name, (cid, started, role, pool) in before.items():
            now = after.get(name)
            changed = now is None or now[:2] != (cid, started)
            if not changed or role.endswith("-reload"):
                continue
            if role in HOST_ROLES:
                renewed.add(role)
            elif pool:
                restarted[pool] = restarted.get(pool, 0) + 1
        requests, failed = 0, []
        for name in self.loops:
            if name not in after:
                continue
            for at, status in self.log(name):
                if start <= at <= end:
                    requests += 1
                    if status != 200:
                        failed.append(f"{name} {at:.3f} {status}")
        return Outcome(end - start, requests, failed, renewed, restarted, predicted_renewed, predicted_restarted,
                       report)
