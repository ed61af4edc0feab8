"""The harness applies independent resources at once, as `pulumi up` does (no daemon: a slow dry backend)."""

from __future__ import annotations

import threading
import time

import pulumi_docker as docker

from testbed.harness.harness import Harness
from testbed.provider.mocks import DryBackend


class _Slow(DryBackend):
    """Creates take 0.3 s and count how many are in flight together."""

    def __init__(self):
        super().__init__()
        self.now = self.most = 0
        self.guard = threading.Lock()

    def create(self, reg, mapping, autoname):
        with self.guard:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(0.3)
        with self.guard:
            self.now -= 1
        return super().create(reg, mapping, autoname)


def test_independent_resources_are_applied_at_once_like_pulumi_up():
    """`pulumi up --parallel` is unbounded by default: twelve independent resources are in flight together (the
    executor's own default, cpus + 4, held six back on a 2-core machine: one host's chain waited on another's)."""
    backend = _Slow()
    result = Harness(backend).run(lambda: [docker.Network(f"n{i}", name=f"n{i}") for i in range(12)])
    assert result.count("create") == 12 and backend.most == 12
